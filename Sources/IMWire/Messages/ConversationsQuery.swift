/// CONVERSATIONS (CONTROL, op 0x0019), client to gateway: a page of the user's conversation
/// list, the most recent first (PROTOCOL.md 6.16).
///
/// BEFORE (the next page: conversations whose newest message is older than this offset, the
/// STREAM_OFFSET of the last line of the page before) and LIMIT (default
/// ``HistoryQuery/defaultLimit``, at most ``HistoryQuery/maxLimit``), both optional. Answered by
/// a ``ConversationsAnswer`` whose REF_SEQUENCE is this frame's sequence, or a negative ACK
/// (BAD_REQUEST, STORE_UNAVAILABLE with RETRY_AFTER, UNKNOWN_OPERATION without an archive).
public struct ConversationsQuery: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .conversations }

    /// Only conversations whose newest message is older than this offset.
    public var before: UInt64?
    /// At most this many.
    public var limit: UInt16?

    /// Creates a query.
    public init(before: UInt64? = nil, limit: UInt16? = nil) {
        self.before = before
        self.limit = limit
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.before = try fields.optionalInteger(.before)
        self.limit = try fields.optionalInteger(.limit)
    }

    public func write(to writer: inout TLVWriter) {
        if let before { writer.write(.before, integer: before) }
        if let limit { writer.write(.limit, integer: limit) }
    }
}
