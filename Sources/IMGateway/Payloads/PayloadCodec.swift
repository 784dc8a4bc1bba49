import Foundation

/// Encodes and decodes the gateway's MQTT payloads: JSON in UTF-8 with sorted keys and
/// unescaped slashes, so that `mosquitto_sub -v -t 'im/#'` shows stable, readable lines.
public enum PayloadCodec {
    /// The MQTT v5 content type of every payload.
    public static let contentType = "application/json"

    /// The JSON of `value`.
    ///
    /// The payload types of this module always encode; non-finite numbers, the one thing
    /// JSON cannot hold, are written as the strings `"inf"`, `"-inf"` and `"nan"`.
    public static func encode<T: Encodable>(_ value: T) -> [UInt8] {
        foundationEncode(value)
    }

    /// The JSON of a chat-path payload, written directly (the same bytes).
    public static func encode<T: FixedShapePayload>(_ value: T) -> [UInt8] {
        value.json()
    }

    /// The JSON of `value` through Foundation's encoder.
    static func foundationEncode<T: Encodable>(_ value: T) -> [UInt8] {
        do {
            return Array(try encoder.encode(value))
        } catch {
            preconditionFailure("\(T.self) failed to encode as JSON: \(error)")
        }
    }

    /// One encoder for every payload (configured once; encoding does not change it, and
    /// Foundation's JSONEncoder is Sendable): making one per message cost more than the
    /// encoding of a chat message.
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
        return encoder
    }()

    private static let decoder = JSONDecoder()

    /// Decodes a `T` from JSON, or throws ``PayloadError``.
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws(PayloadError) -> T {
        try foundationDecode(type, from: bytes)
    }

    /// Decodes a chat-path payload: read directly when it has the usual shape, otherwise
    /// through Foundation (which also says what is wrong with it).
    public static func decode<T: FixedShapePayload>(_ type: T.Type, from bytes: [UInt8]) throws(PayloadError) -> T {
        if let value = T(fastJSON: bytes) { return value }
        return try foundationDecode(type, from: bytes)
    }

    /// Decodes a `T` from JSON through Foundation's decoder.
    static func foundationDecode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws(PayloadError) -> T {
        do {
            return try decoder.decode(T.self, from: Data(bytes))
        } catch let error as PayloadError {
            throw error
        } catch let DecodingError.keyNotFound(key, context) {
            throw .malformed("no \(path(context.codingPath + [key]))")
        } catch let DecodingError.typeMismatch(_, context), let DecodingError.valueNotFound(_, context) {
            throw .malformed("\(path(context.codingPath)): \(context.debugDescription)")
        } catch let DecodingError.dataCorrupted(context) {
            throw .malformed(context.codingPath.isEmpty ? "not JSON" : "\(path(context.codingPath)): \(context.debugDescription)")
        } catch {
            throw .malformed("\(error)")
        }
    }

    private static func path(_ codingPath: [any CodingKey]) -> String {
        codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
    }
}
