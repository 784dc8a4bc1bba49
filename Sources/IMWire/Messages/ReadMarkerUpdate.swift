/// READ_MARKER (CONTROL, op 0x001B): where the user has read a conversation to
/// (PROTOCOL.md 6.17).
///
/// From a client: TO or GROUP and READ_THROUGH (an offset of the user's stream: a message of
/// the conversation, usually the newest shown). The gateway ACKs it with READ_THROUGH (the
/// marker now: it never moves back) and UNREAD, or refuses it (BAD_REQUEST for an offset past
/// the conversation's newest message or a conversation the user has no message in, FORBIDDEN,
/// STORE_UNAVAILABLE, UNKNOWN_OPERATION without an archive). From the gateway: the same items
/// and UNREAD, when another device of the user moved the marker; a notification, not
/// acknowledged. Read receipts to the sender are separate (RECEIPT).
public struct ReadMarkerUpdate: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .readMarker }

    /// The conversation.
    public var conversation: IMConversation
    /// Read up to this offset of the user's stream.
    public var readThrough: UInt64
    /// From the gateway: what is left unread.
    public var unread: UInt32?

    /// Creates a marker.
    public init(conversation: IMConversation, readThrough: UInt64, unread: UInt32? = nil) {
        self.conversation = conversation
        self.readThrough = readThrough
        self.unread = unread
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.conversation = try IMConversation(fields: fields)
        self.readThrough = try fields.integer(.readThrough)
        self.unread = try fields.optionalInteger(.unread)
    }

    public func write(to writer: inout TLVWriter) {
        conversation.write(to: &writer)
        writer.write(.readThrough, integer: readThrough)
        if let unread { writer.write(.unread, integer: unread) }
    }
}
