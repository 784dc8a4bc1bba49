/// DELETE (CONTROL, op 0x001C), client to gateway: delete a message this user sent, for
/// everyone (PROTOCOL.md 6.18).
///
/// MESSAGE_ID names the message; FROM, when present, must be the user (deleting another
/// user's message is FORBIDDEN). The gateway ACKs it with MESSAGE_ID and SERVER_TIME (when it
/// was deleted) once every copy is a tombstone; each recipient device, and the user's other
/// devices, then get a DELIVERY with DELETED, online or at their next login. Refused:
/// BAD_REQUEST (no message of the user with that id is stored), FORBIDDEN, STORE_UNAVAILABLE
/// with RETRY_AFTER, UNKNOWN_OPERATION (a gateway without an archive). Deleting again is
/// ACKed like the first time.
public struct MessageDelete: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .delete }

    /// The message's id.
    public var messageID: String
    /// Its sender, if the client names it.
    public var from: String?

    /// Creates a request.
    public init(messageID: String, from: String? = nil) {
        self.messageID = messageID
        self.from = from
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.messageID = try fields.string(.messageID, length: IMWire.messageIDLength)
        self.from = try fields.optionalIdentifier(.from)
    }

    public func write(to writer: inout TLVWriter) {
        if let from { writer.write(.from, string: from) }
        writer.write(.messageID, string: messageID)
    }
}
