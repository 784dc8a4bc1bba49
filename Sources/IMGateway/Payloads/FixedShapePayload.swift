/// A payload on the chat path whose JSON is written and read directly
/// (``PayloadJSONWriter``, ``PayloadJSONReader``) instead of through Foundation's
/// `JSONEncoder`/`JSONDecoder`, which cost more than the rest of the gateway's work on a chat
/// message. The bytes are the same either way: ``PayloadCodec`` picks this path for these
/// types, and falls back to Foundation to read anything the fast reader does not take.
public protocol FixedShapePayload: Codable {
    /// The JSON, exactly as ``PayloadCodec``'s Foundation encoder writes it.
    func json() -> [UInt8]

    /// Reads the JSON, or returns `nil` when it is not in the shape the fast reader takes
    /// (then Foundation decodes it, or says what is wrong).
    init?(fastJSON bytes: [UInt8])
}
