/// A chat message from a client (DATA, implied op CHAT): TO, MESSAGE_ID, content.
///
/// The gateway publishes it to the recipient's inbox and ACKs the frame once the broker
/// accepted it (the ACK carries MESSAGE_ID and SERVER_TIME), or answers a negative ACK.
public struct ChatSend: IMMessageBody {
    public static var frameType: IMFrameType { .data }
    public static var operation: IMOperation { .chat }

    /// The recipient's user id.
    public var to: String
    /// Chosen by the sending client, unique per sender; kept when resending.
    public var messageID: String
    /// The content.
    public var content: IMContent
    /// QoS 1 (default) or 2 (exactly once, if the gateway announced ``IMFeatures/qos2Chat``).
    public var qos: IMQoS
    /// Set when resending a message that may have been sent before.
    public var resend: Bool
    /// Application-defined items (0xF000–0xFFFE), passed to the recipient unchanged.
    public var extensions: [TLVItem]

    /// Creates a chat message.
    public init(
        to: String,
        messageID: String,
        content: IMContent,
        qos: IMQoS = .atLeastOnce,
        resend: Bool = false,
        extensions: [TLVItem] = []
    ) {
        self.to = to
        self.messageID = messageID
        self.content = content
        self.qos = qos
        self.resend = resend
        self.extensions = extensions
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.to = try fields.identifier(.to)
        self.messageID = try fields.string(.messageID, length: IMWire.messageIDLength)
        self.content = try IMContent(fields: fields)
        self.qos = try fields.qos(default: .atLeastOnce)
        self.resend = try fields.flag(.resend)
        self.extensions = fields.applicationItems
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.to, string: self.to)
        writer.write(.messageID, string: self.messageID)
        if self.qos != .atLeastOnce { writer.write(.qos, integer: self.qos.rawValue) }
        if self.resend { writer.write(.resend, flag: true) }
        self.content.write(to: &writer)
        for item in self.extensions { writer.write(item) }
    }
}
