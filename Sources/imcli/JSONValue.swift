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

    var rendered: String {
        switch self {
        case .number(let value): return "\(value)"
        case .integer(let value): return "\(value)"
        case .double(let value): return value.isFinite ? "\(value)" : "null"
        case .bool(let value): return value ? "true" : "false"
        case .array(let values): return "[" + values.map(\.rendered).joined(separator: ",") + "]"
        case .string(let value):
            var out = "\""
            for scalar in value.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                case _ where scalar.value < 0x20:
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                default: out.unicodeScalars.append(scalar)
                }
            }
            return out + "\""
        }
    }
}
