import Foundation

/// A JSON value for one output line (objects are written by ``Output`` as ordered fields).
enum JSONValue: Sendable, ExpressibleByStringLiteral {
    case string(String)
    case number(UInt64)
    case integer(Int64)
    /// Non-finite values are written as `null` (JSON has no NaN or infinity).
    case double(Double)
    case bool(Bool)
    case array([JSONValue])

    init(stringLiteral value: String) { self = .string(value) }

    /// Foundation's JSON string escaping, slashes left as they are.
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        return encoder
    }()

    var rendered: String {
        switch self {
        case .number(let value): return "\(value)"
        case .integer(let value): return "\(value)"
        case .double(let value): return value.isFinite ? "\(value)" : "null"
        case .bool(let value): return value ? "true" : "false"
        case .array(let values): return "[" + values.map(\.rendered).joined(separator: ",") + "]"
        case .string(let value):
            do {
                return String(decoding: try Self.encoder.encode(value), as: UTF8.self)
            } catch {
                preconditionFailure("a String always encodes as JSON: \(error)")
            }
        }
    }
}
