/// Feature bits (u16) announced in the version handshake. Unknown bits are ignored.
public struct IMFeatures: OptionSet, Hashable, Sendable {
    /// The bits on the wire.
    public var rawValue: UInt16

    /// Wraps feature bits.
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// Bit 0: the sender accepts zlib bodies (compress type 1). Its peer may then compress.
    public static let zlib = IMFeatures(rawValue: 1 << 0)
    /// Bit 1: AES encryption. Reserved: never set by this version.
    public static let aes = IMFeatures(rawValue: 1 << 1)
    /// Bit 2: chat with QoS 2 (exactly once) is available.
    public static let qos2Chat = IMFeatures(rawValue: 1 << 2)
    /// Bit 3: presence operations are available.
    public static let presence = IMFeatures(rawValue: 1 << 3)
    /// Bit 4: location operations are available.
    public static let location = IMFeatures(rawValue: 1 << 4)
    /// Bit 5: generic publish/subscribe is available.
    public static let pubSub = IMFeatures(rawValue: 1 << 5)
    /// Bit 6: delivery and read receipts are available.
    public static let receipts = IMFeatures(rawValue: 1 << 6)
    /// Bit 7: group chat is available.
    public static let groups = IMFeatures(rawValue: 1 << 7)
    /// Bit 8: carbons (copies of what the user's other devices send) are available.
    public static let carbons = IMFeatures(rawValue: 1 << 8)
    /// Bit 9: typing states are available.
    public static let typing = IMFeatures(rawValue: 1 << 9)
    /// Bit 10: the gateway stores every chat before its ACK and catches devices up (SYNC,
    /// STREAM_OFFSET).
    public static let archive = IMFeatures(rawValue: 1 << 10)

    /// Each defined bit with its document name and meaning, in bit order.
    public static let allKnown: [(name: String, feature: IMFeatures, meaning: String)] = [
        ("ZLIB", .zlib, "The sender accepts zlib bodies; its peer may compress from now on."),
        ("AES", .aes, "Reserved for AES encryption; never set by version 1.0."),
        ("QOS2_CHAT", .qos2Chat, "Chat with QOS 2 (exactly once) is available."),
        ("PRESENCE", .presence, "Presence operations are available."),
        ("LOCATION", .location, "Location operations are available."),
        ("PUBSUB", .pubSub, "Generic publish/subscribe is available."),
        ("RECEIPTS", .receipts, "Delivery and read receipts are available."),
        ("GROUPS", .groups, "Group chat is available."),
        ("CARBONS", .carbons, "Carbons of what the user's other devices send are available."),
        ("TYPING", .typing, "Typing states are available."),
        ("ARCHIVE", .archive, "Chats are stored before their ACK; devices catch up with SYNC and STREAM_OFFSET."),
    ]
}
