import Foundation
import Yams

extension GatewayConfiguration {
    /// Reads, parses and validates the YAML file at `path`.
    public static func load(from path: String) throws(GatewayConfigurationError) -> GatewayConfiguration {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw .unreadable(path: path, reason: (error as NSError).localizedDescription)
        }
        return try self.parse(yaml: text)
    }

    /// Parses and validates a YAML document; an empty document gives ``defaults``.
    ///
    /// Throws ``GatewayConfigurationError``: `syntax` for text that is not YAML (including a key
    /// written twice), `unknownKey` naming the key path, `invalidValue` for a value of the wrong
    /// type, and `invalid` with every problem ``validate()`` finds.
    public static func parse(yaml: String) throws(GatewayConfigurationError) -> GatewayConfiguration {
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch {
            throw .syntax("\(error)")
        }
        var configuration = GatewayConfiguration.defaults
        if let root, root.null == nil {
            do {
                configuration = try YAMLDecoder().decode(GatewayConfiguration.self, from: root)
            } catch let error as GatewayConfigurationError {
                throw error
            } catch let error as DecodingError {
                throw Self.describe(error, in: root)
            } catch {
                throw .syntax("\(error)")
            }
        }
        try configuration.validate()
        return configuration
    }

    /// Turns a decoding error into a message naming the key and showing the value as written.
    private static func describe(_ error: DecodingError, in root: Node) -> GatewayConfigurationError {
        switch error {
        case .keyNotFound(let key, let context):
            return .invalidValue(key: keyPath(context.codingPath + [key]), value: "(missing)", reason: "is required here")
        case .typeMismatch(let type, let context):
            let value = Self.node(at: context.codingPath, in: root)
            return .invalidValue(key: keyPath(context.codingPath), value: Self.show(value), reason: Self.expectation(type))
        case .valueNotFound(let type, let context):
            return .invalidValue(key: keyPath(context.codingPath), value: "(empty)", reason: Self.expectation(type))
        case .dataCorrupted(let context):
            let value = Self.node(at: context.codingPath, in: root)
            return .invalidValue(key: keyPath(context.codingPath), value: Self.show(value), reason: "is not valid here")
        @unknown default:
            return .syntax("\(error)")
        }
    }

    private static func keyPath(_ codingPath: [any CodingKey]) -> String {
        codingPath.isEmpty ? "(top level)" : codingPath.map(\.stringValue).joined(separator: ".")
    }

    private static func node(at codingPath: [any CodingKey], in root: Node) -> Node? {
        var node: Node? = root
        for key in codingPath { node = node?[key.stringValue] }
        return node
    }

    private static func show(_ node: Node?) -> String {
        switch node {
        case .scalar(let scalar)?:
            let text = scalar.string
            let bare = Int(text) != nil || Double(text) != nil || ["true", "false"].contains(text)
            return bare && scalar.style == .plain ? text : text.debugDescription
        case .mapping?: return "a mapping"
        case .sequence?: return "a list"
        case .alias?, nil: return "this value"
        }
    }

    private static func expectation(_ type: Any.Type) -> String {
        switch type {
        case is Int.Type: "is not an integer"
        case is Double.Type: "is not a number"
        case is Bool.Type: "is not true or false"
        case is String.Type: "is not a string"
        default: "is not a mapping"
        }
    }
}

// MARK: Decoding helpers shared by the settings types

/// Any key, to list the keys a mapping really has.
struct AnyCodingKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension Decoder {
    /// Throws ``GatewayConfigurationError/unknownKey(_:)`` for the first key of this mapping
    /// that `Keys` does not list.
    func rejectUnknownKeys<Keys: CodingKey & CaseIterable>(_: Keys.Type) throws {
        let known = Set(Keys.allCases.map(\.stringValue))
        let container = try self.container(keyedBy: AnyCodingKey.self)
        if let unknown = container.allKeys.first(where: { !known.contains($0.stringValue) }) {
            throw GatewayConfigurationError.unknownKey((self.codingPath + [unknown]).map(\.stringValue).joined(separator: "."))
        }
    }
}

extension KeyedDecodingContainer {
    /// The value at `key`, or `fallback` when the key is absent or null.
    func value<T: Decodable>(_ key: Key, or fallback: T) throws -> T {
        try self.decodeIfPresent(T.self, forKey: key) ?? fallback
    }

    /// A required file or directory path, `~` expanded.
    func path(_ key: Key) throws -> String {
        GatewayConfiguration.expandingTilde(try self.decode(String.self, forKey: key))
    }

    /// An optional file or directory path, `~` expanded.
    func optionalPath(_ key: Key) throws -> String? {
        try self.decodeIfPresent(String.self, forKey: key).map { GatewayConfiguration.expandingTilde($0) }
    }
}

extension GatewayConfiguration {
    /// `path` with a leading `~` or `~/` replaced by `$HOME`.
    static func expandingTilde(_ path: String, home: String? = ProcessInfo.processInfo.environment["HOME"]) -> String {
        guard let home, path == "~" || path.hasPrefix("~/") else { return path }
        return home + path.dropFirst()
    }
}
