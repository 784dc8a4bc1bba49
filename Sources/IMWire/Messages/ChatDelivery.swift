/// A chat message delivered to a device (DATA, implied op DELIVERY): FROM, MESSAGE_ID,
/// SERVER_TIME, content. The device ACKs it; until then the gateway may deliver it again
/// with the resend flag, so devices de-duplicate by (FROM, MESSAGE_ID).
public struct ChatDelivery: IMMessageBody {
    public static var frameType: IMFrameType { .data }
    public static var operation: IMOperation { .delivery }

    /// The sender's user id.
    public var from: String
    /// The sender's message id.
    public var messageID: String
    /// When the gateway accepted the message, Unix milliseconds.
    public var serverTime: UInt64
    /// The content.
    public var content: IMContent
    /// The QoS the message was sent with (1 if absent).
    public var qos: IMQoS
    /// Set when this message may have been delivered before.
    public var resend: Bool
    /// Application-defined items (0xF000–0xFFFE) from the sender.
    public var extensions: [TLVItem]

    /// Creates a delivery.
    public init(
        from: String,
        messageID: String,
        serverTime: UInt64,
        content: IMContent,
        qos: IMQoS = .atLeastOnce,
        resend: Bool = false,
        extensions: [TLVItem] = []
    ) {
        self.from = from
        self.messageID = messageID
        self.serverTime = serverTime
        self.content = content
        self.qos = qos
        self.resend = resend
        self.extensions = extensions
    }

    /// The delivery of `chat` sent by `from`, accepted at `serverTime`.
    public init(_ chat: ChatSend, from: String, serverTime: UInt64, resend: Bool = false) {
        self.init(
            from: from,
            messageID: chat.messageID,
            serverTime: serverTime,
            content: chat.content,
            qos: chat.qos,
            resend: resend,
            extensions: chat.extensions
        )
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.from = try fields.identifier(.from)
        self.messageID = try fields.string(.messageID, length: IMWire.messageIDLength)
        self.serverTime = try fields.integer(.serverTime)
        self.content = try IMContent(fields: fields)
        self.qos = try fields.qos(default: .atLeastOnce)
        self.resend = try fields.flag(.resend)
        self.extensions = fields.applicationItems
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.from, string: self.from)
        writer.write(.messageID, string: self.messageID)
        writer.write(.serverTime, integer: self.serverTime)
        if self.qos != .atLeastOnce { writer.write(.qos, integer: self.qos.rawValue) }
        if self.resend { writer.write(.resend, flag: true) }
        self.content.write(to: &writer)
        for item in self.extensions { writer.write(item) }
    }
}
