/// HISTORY (CONTROL, op 0x0017), client to gateway: a page of a conversation's history
/// (PROTOCOL.md 6.15).
///
/// TO or GROUP names the conversation; BEFORE (older than an offset, paging back) or AFTER
/// (newer than an offset, paging forward), or neither (the newest); LIMIT (default
/// ``defaultLimit``, at most ``maxLimit``). Answered by a ``HistoryAnswer`` whose
/// REF_SEQUENCE is this frame's sequence, or a negative ACK (FORBIDDEN for a group the user is
/// not in, BAD_REQUEST, STORE_UNAVAILABLE with RETRY_AFTER, UNKNOWN_OPERATION from a gateway
/// without an archive).
public struct HistoryQuery: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .history }

    /// Messages a page holds when LIMIT is absent.
    public static let defaultLimit: UInt16 = 50
    /// The most a page holds.
    public static let maxLimit: UInt16 = 200

    /// Where a page starts.
    public enum Position: Hashable, Sendable {
        /// The newest messages.
        case latest
        /// The newest messages older than this offset.
        case before(UInt64)
        /// The oldest messages newer than this offset.
        case after(UInt64)
    }

    /// The conversation.
    public var conversation: IMConversation
    /// Where the page starts.
    public var position: Position
    /// At most this many (LIMIT; `nil`: ``defaultLimit``).
    public var limit: UInt16?

    /// Creates a query.
    public init(conversation: IMConversation, position: Position = .latest, limit: UInt16? = nil) {
        self.conversation = conversation
        self.position = position
        self.limit = limit
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.conversation = try IMConversation(fields: fields)
        let before: UInt64? = try fields.optionalInteger(.before)
        let after: UInt64? = try fields.optionalInteger(.after)
        switch (before, after) {
        case (nil, nil): self.position = .latest
        case (let before?, nil): self.position = .before(before)
        case (nil, let after?): self.position = .after(after)
        case (_?, _?): throw .invalidField(.after, .duplicate)
        }
        self.limit = try fields.optionalInteger(.limit)
    }

    public func write(to writer: inout TLVWriter) {
        conversation.write(to: &writer)
        switch position {
        case .latest: break
        case .before(let offset): writer.write(.before, integer: offset)
        case .after(let offset): writer.write(.after, integer: offset)
        }
        if let limit { writer.write(.limit, integer: limit) }
    }
}
