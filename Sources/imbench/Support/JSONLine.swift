import Foundation

/// One line of JSON with its keys in the order they were added (results read better that
/// way than sorted).
struct JSONLine: Sendable {
    /// A JSON value.
    indirect enum Value: Sendable {
        case int(Int)
        case double(Double, decimals: Int)
        case string(String)
        case bool(Bool)
        case null
        case array([Value])
        case object(JSONLine)
    }

    private var fields: [(String, Value)] = []

    init() {}

    /// Adds a field (a later one with the same key is written too: avoid that).
    mutating func add(_ key: String, _ value: Value) {
        fields.append((key, value))
    }

    mutating func add(_ key: String, _ value: Int) { add(key, .int(value)) }
    mutating func add(_ key: String, _ value: Int?) { add(key, value.map { .int($0) } ?? .null) }
    mutating func add(_ key: String, _ value: String) { add(key, .string(value)) }
    mutating func add(_ key: String, _ value: String?) { add(key, value.map { .string($0) } ?? .null) }
    mutating func add(_ key: String, _ value: Bool) { add(key, .bool(value)) }
    /// A number rounded to `decimals` places; nil, NaN and infinity become null.
    mutating func add(_ key: String, _ value: Double?, decimals: Int = 3) {
        guard let value, value.isFinite else { return add(key, .null) }
        add(key, .double(value, decimals: decimals))
    }

    /// The JSON text, without a newline.
    var text: String {
        "{" + fields.map { "\(Self.quote($0.0)):\(Self.render($0.1))" }.joined(separator: ",") + "}"
    }

    /// Prints the line on stdout.
    func print() {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    private static func render(_ value: Value) -> String {
        switch value {
        case .int(let v): return String(v)
        case .double(let v, let decimals):
            var text = String(format: "%.\(decimals)f", v)
            if text.contains(".") {
                while text.hasSuffix("0") { text.removeLast() }
                if text.hasSuffix(".") { text.removeLast() }
            }
            return text == "-0" ? "0" : text
        case .string(let s): return quote(s)
        case .bool(let b): return b ? "true" : "false"
        case .null: return "null"
        case .array(let values): return "[" + values.map(render).joined(separator: ",") + "]"
        case .object(let line): return line.text
        }
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        return encoder
    }()

    /// `string` as a JSON string, escaped by Foundation.
    private static func quote(_ string: String) -> String {
        do {
            return String(decoding: try encoder.encode(string), as: UTF8.self)
        } catch {
            preconditionFailure("a String always encodes as JSON: \(error)")
        }
    }
}

extension JSONLine {
    /// The workload every chat-shaped benchmark reports: seconds, pairs, rate, window, QoS, size.
    mutating func add(_ settings: ChatSettings) {
        add("seconds", settings.seconds, decimals: 1)
        add("pairs", settings.pairs)
        if settings.duplex { add("duplex", true) }
        if !settings.receiptNotices { add("receipt_notices", false) }
        add("rate", settings.rate, decimals: 0)
        add("window", settings.window)
        add("qos", settings.qos)
        add("size", settings.size)
    }
}
