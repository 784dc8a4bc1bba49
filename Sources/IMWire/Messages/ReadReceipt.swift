/// A read receipt from a client (READ_RECEIPT, implied op RECEIPT): the user read the
/// message MESSAGE_ID that TO sent. The gateway ACKs it and forwards a ``ReceiptNotice``
/// to the sender's devices.
public struct ReadReceipt: IMMessageBody {
    public static var frameType: IMFrameType { .readReceipt }
    public static var operation: IMOperation { .receipt }

    /// The user who sent the message that was read.
    public var to: String
    /// The message's id.
    public var messageID: String

    /// Creates a read receipt.
    public init(to: String, messageID: String) {
        self.to = to
        self.messageID = messageID
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.to = try fields.identifier(.to)
        self.messageID = try fields.string(.messageID, length: IMWire.messageIDLength)
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.to, string: self.to)
        writer.write(.messageID, string: self.messageID)
    }
}
