/// A receipt delivered to the sender's devices (READ_RECEIPT, implied op RECEIPT_NOTICE):
/// FROM (the recipient) received or read MESSAGE_ID. The device ACKs it.
public struct ReceiptNotice: IMMessageBody {
    public static var frameType: IMFrameType { .readReceipt }
    public static var operation: IMOperation { .receiptNotice }

    /// The recipient of the original message.
    public var from: String
    /// The original message's id.
    public var messageID: String
    /// Delivered or read.
    public var kind: IMReceiptKind
    /// When the gateway learned it, Unix milliseconds.
    public var serverTime: UInt64

    /// Creates a receipt notice.
    public init(from: String, messageID: String, kind: IMReceiptKind, serverTime: UInt64) {
        self.from = from
        self.messageID = messageID
        self.kind = kind
        self.serverTime = serverTime
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.from = try fields.identifier(.from)
        self.messageID = try fields.string(.messageID, length: IMWire.messageIDLength)
        let raw = try fields.integer(.receiptKind, as: UInt8.self)
        guard let kind = IMReceiptKind(rawValue: raw) else {
            throw .invalidField(.receiptKind, .valueOutOfRange(String(raw)))
        }
        self.kind = kind
        self.serverTime = try fields.integer(.serverTime)
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.from, string: self.from)
        writer.write(.messageID, string: self.messageID)
        writer.write(.receiptKind, integer: self.kind.rawValue)
        writer.write(.serverTime, integer: self.serverTime)
    }
}
