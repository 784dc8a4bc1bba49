/// A chat message delivered to a device (DATA, implied op DELIVERY): FROM, MESSAGE_ID,
/// SERVER_TIME, content, and GROUP for a group message. The device ACKs it; until then the
/// gateway may deliver it again with the resend flag, so devices de-duplicate by (FROM,
/// MESSAGE_ID).
///
/// A **carbon** (``carbon``) is a copy of a message the device's own user sent from another
/// device: FROM is the user, and TO (one-to-one) or GROUP names the conversation. Having FROM
/// and TO, it carries its operation item (TO alone would imply CHAT).
public struct ChatDelivery: IMMessageBody {
    public static var frameType: IMFrameType { .data }
    public static var operation: IMOperation { .delivery }

    /// The sender's user id.
    public var from: String
    /// The group, for a group message.
    public var group: String?
    /// For a carbon of a one-to-one message: its recipient.
    public var to: String?
    /// Whether this is a copy of a message the user sent from another device.
    public var carbon: Bool
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
    /// From a gateway with a message archive: the message's offset in the receiving user's
    /// stream (STREAM_OFFSET).
    public var streamOffset: UInt64?
    /// Whether it was replayed from the archive (the device had missed it).
    public var archived: Bool
    /// DELETED: the sender deleted the message for everyone; ``content`` is empty text.
    public var deleted: Bool = false

    /// Creates a delivery.
    public init(
        from: String,
        messageID: String,
        serverTime: UInt64,
        content: IMContent,
        qos: IMQoS = .atLeastOnce,
        resend: Bool = false,
        extensions: [TLVItem] = [],
        group: String? = nil,
        to: String? = nil,
        carbon: Bool = false,
        streamOffset: UInt64? = nil,
        archived: Bool = false
    ) {
        self.from = from
        self.group = group
        self.to = to
        self.carbon = carbon
        self.messageID = messageID
        self.serverTime = serverTime
        self.content = content
        self.qos = qos
        self.resend = resend
        self.extensions = extensions
        self.streamOffset = streamOffset
        self.archived = archived
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
            extensions: chat.extensions,
            group: chat.group
        )
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.from = try fields.identifier(.from)
        self.group = try fields.optionalIdentifier(.group)
        self.to = try fields.optionalIdentifier(.to)
        self.carbon = try fields.flag(.carbon)
        self.messageID = try fields.string(.messageID, length: IMWire.messageIDLength)
        self.serverTime = try fields.integer(.serverTime)
        self.deleted = try fields.flag(.deleted)
        self.content = self.deleted ? .text("") : try IMContent(fields: fields)
        self.qos = try fields.qos(default: .atLeastOnce)
        self.resend = try fields.flag(.resend)
        self.extensions = fields.applicationItems
        self.streamOffset = try fields.optionalInteger(.streamOffset)
        self.archived = try fields.flag(.archived)
    }

    public func write(to writer: inout TLVWriter) {
        if let to = self.to {
            writer.write(.operation, integer: Self.operation.rawValue)
            writer.write(.from, string: self.from)
            writer.write(.to, string: to)
        } else {
            writer.write(.from, string: self.from)
        }
        if let group = self.group { writer.write(.group, string: group) }
        if self.carbon { writer.write(.carbon, flag: true) }
        writer.write(.messageID, string: self.messageID)
        writer.write(.serverTime, integer: self.serverTime)
        if self.qos != .atLeastOnce { writer.write(.qos, integer: self.qos.rawValue) }
        if self.resend { writer.write(.resend, flag: true) }
        if let streamOffset { writer.write(.streamOffset, integer: streamOffset) }
        if self.archived { writer.write(.archived, flag: true) }
        if self.deleted {
            writer.write(.deleted, flag: true)
        } else {
            self.content.write(to: &writer)
        }
        for item in self.extensions { writer.write(item) }
    }
}
