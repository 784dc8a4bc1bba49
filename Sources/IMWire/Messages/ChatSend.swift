/// A chat message from a client (DATA, implied op CHAT): TO (a user) or GROUP, MESSAGE_ID,
/// content.
///
/// The gateway publishes it to the recipient's inbox and ACKs the frame once the broker
/// accepted it (the ACK carries MESSAGE_ID and SERVER_TIME), or answers a negative ACK.
public struct ChatSend: IMMessageBody {
    public static var frameType: IMFrameType { .data }
    public static var operation: IMOperation { .chat }

    /// The recipient's user id; for a group message (``isGroup``), the group's id.
    public var to: String
    /// Whether ``to`` names a group: the message goes to every member (the item GROUP instead
    /// of TO).
    public var isGroup: Bool
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
        self.isGroup = false
        self.messageID = messageID
        self.content = content
        self.qos = qos
        self.resend = resend
        self.extensions = extensions
    }

    /// Creates a message to every member of `group`.
    public init(
        group: String,
        messageID: String,
        content: IMContent,
        qos: IMQoS = .atLeastOnce,
        resend: Bool = false,
        extensions: [TLVItem] = []
    ) {
        self.init(to: group, messageID: messageID, content: content, qos: qos, resend: resend, extensions: extensions)
        self.isGroup = true
    }

    /// The group's id, for a group message.
    public var group: String? { isGroup ? to : nil }

    public init(fields: TLVFields) throws(IMWireError) {
        if fields[.group] != nil {
            guard fields[.to] == nil else { throw .invalidField(.group, .valueOutOfRange("a CHAT names TO or GROUP, not both")) }
            self.to = try fields.identifier(.group)
            self.isGroup = true
        } else {
            self.to = try fields.identifier(.to)
            self.isGroup = false
        }
        self.messageID = try fields.string(.messageID, length: IMWire.messageIDLength)
        self.content = try IMContent(fields: fields)
        self.qos = try fields.qos(default: .atLeastOnce)
        self.resend = try fields.flag(.resend)
        self.extensions = fields.applicationItems
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(isGroup ? .group : .to, string: self.to)
        writer.write(.messageID, string: self.messageID)
        if self.qos != .atLeastOnce { writer.write(.qos, integer: self.qos.rawValue) }
        if self.resend { writer.write(.resend, flag: true) }
        self.content.write(to: &writer)
        for item in self.extensions { writer.write(item) }
    }
}
