extension IMTag {
    /// How an item's value is encoded. All integers are big-endian.
    public enum ValueType: String, Hashable, Sendable, CaseIterable {
        /// 1-byte unsigned integer.
        case u8
        /// 2-byte unsigned integer.
        case u16
        /// 4-byte unsigned integer.
        case u32
        /// 8-byte unsigned integer.
        case u64
        /// 4-byte two's-complement integer.
        case i32
        /// 8-byte IEEE 754 binary64, big-endian bit pattern.
        case f64
        /// UTF-8 text, no terminator.
        case utf8
        /// Opaque bytes.
        case bytes
        /// u16 `major<<8|minor` then u16 feature bits (4 bytes).
        case version
        /// Nested TLV items.
        case container

        /// The exact value length, for fixed-size types.
        public var fixedLength: Int? {
            switch self {
            case .u8: 1
            case .u16: 2
            case .u32, .i32, .version: 4
            case .u64, .f64: 8
            case .utf8, .bytes, .container: nil
            }
        }
    }

    /// Every tag defined by this version, in ascending order.
    public static let allKnown: [IMTag] = catalog.keys.sorted().map(IMTag.init(rawValue:))

    /// The upper-snake-case name used in the protocol document, or `nil` for an unknown tag.
    public var name: String? { Self.catalog[self.rawValue]?.name }

    /// The value type; application-defined and unknown tags are ``ValueType/bytes``.
    public var valueType: ValueType { Self.catalog[self.rawValue]?.type ?? .bytes }

    /// A one-line English meaning, or `nil` for an unknown tag.
    public var meaning: String? { Self.catalog[self.rawValue]?.meaning }

    private static let catalog: [UInt16: (name: String, type: ValueType, meaning: String)] = [
        0x0001: ("VERSION_REQUEST", .version, "HELLO: sender's version and feature bits."),
        0x0002: ("VERSION_RESPONSE", .version, "HELLO_OK: gateway's version and feature bits."),
        0x0010: ("SEED_READ_RECEIPT", .u32, "Seed read receipt by sequence. Not used; ignored."),
        0x0011: ("GROUP", .utf8, "Group id: the group a CHAT goes to, a DELIVERY or TYPING comes from."),
        0x0012: ("FILE", .bytes, "Seed file item. Reserved."),
        0x0020: ("USER_STATUS", .u8, "Presence status: 0 offline, 1 online."),
        0x0021: ("TYPING", .u8, "Typing state: 0 stopped, 1 typing, 2 recording audio, 3 away from the conversation."),
        0x0100: ("AUTH_TOKEN", .utf8, "HS256 JWT; its `sub` claim is the user id."),
        0x0101: ("DEVICE_ID", .utf8, "Device id, 1-128 bytes, no / + # NUL."),
        0x0102: ("USER_ID", .utf8, "User id, 1-128 bytes, no / + # NUL."),
        0x0103: ("ERROR_CODE", .u16, "Error or reason code, see the error code table."),
        0x0104: ("ERROR_MESSAGE", .utf8, "Human-readable error text."),
        0x0105: ("OP", .u16, "Operation, see the operation table."),
        0x0106: ("REF_SEQUENCE", .u32, "Sequence of the frame this frame answers."),
        0x0107: ("HEARTBEAT_INTERVAL", .u16, "Seconds between heartbeats the gateway expects."),
        0x0108: ("MAX_BODY_LENGTH", .u32, "The sender's body limit in bytes."),
        0x0109: ("RECEIPT_NOTICES", .u8, "LOGIN: 1 (default) send this device RECEIPT_NOTICE frames, 0 do not."),
        0x010A: ("TOKEN_EXPIRY", .u64, "LOGIN_OK, ACK of TOKEN_REFRESH: the token's `exp` claim, Unix milliseconds."),
        0x010B: ("RETRY_AFTER", .u32, "Negative ACK RATE_LIMITED: milliseconds to wait before sending such requests again."),
        0x010C: ("CARBONS", .u8, "LOGIN: 1 (default) send this device carbons of what the user's other devices send, 0 do not."),
        0x010D: ("SESSION_RESUMED", .u8, "LOGIN_OK: 1 the broker kept the device's session (its queue follows), 0 a new session (nothing was kept)."),
        0x010E: ("SYNC_STATUS", .u8, "LOGIN_OK, ACK of SYNC: how the device's position was taken: 0 continued, 1 new, 2 another epoch, 3 partly expired, 4 refused, 5 archive unavailable."),
        0x0200: ("TO", .utf8, "Recipient user id (a carbon: the peer of the conversation)."),
        0x0201: ("FROM", .utf8, "Sender user id."),
        0x0202: ("MESSAGE_ID", .utf8, "Message id, 1-128 bytes, chosen by the sender, unique per sender."),
        0x0203: ("SERVER_TIME", .u64, "Gateway time, Unix milliseconds."),
        0x0204: ("RESEND", .u8, "1: this frame may have been sent before (receivers de-duplicate)."),
        0x0205: ("QOS", .u8, "Quality of service 0, 1 or 2."),
        0x0206: ("RECEIPT_KIND", .u8, "1 delivered, 2 read."),
        0x0207: ("CARBON", .u8, "DELIVERY: 1, a copy of a message the user sent from another device."),
        0x0208: ("STREAM_OFFSET", .u64, "A place in a user's stream of stored messages: DELIVERY, the message's; ACK of CHAT, in the sender's own stream; LOGIN, SYNC, the device has all up to it; LOGIN_OK, ACK of SYNC, caught up from or to."),
        0x0209: ("STREAM_EPOCH", .u64, "The archive's epoch: offsets of one epoch mean nothing in another."),
        0x020A: ("ARCHIVED", .u8, "DELIVERY: 1, replayed from the archive (the device had missed it)."),
        0x020B: ("BEFORE", .u64, "HISTORY, CONVERSATIONS: older than this offset of the user's stream."),
        0x020C: ("AFTER", .u64, "HISTORY: newer than this offset of the user's stream."),
        0x020D: ("LIMIT", .u16, "HISTORY (default 50, at most 200), CONVERSATIONS (default 50, at most 200): at most this many."),
        0x020E: ("COMPLETE", .u8, "HISTORY_PAGE, CONVERSATION_LIST: 1, nothing is left in the page's direction."),
        0x020F: ("UNREAD", .u32, "Messages from others after the read marker."),
        0x0210: ("READ_THROUGH", .u64, "Read marker: the user has read the conversation up to this offset of its stream."),
        0x0211: ("DELETED", .u8, "DELIVERY, history record: 1, the sender deleted this message for everyone (no content)."),
        0x0300: ("LAST_SEEN", .u64, "When the device was last online, Unix milliseconds."),
        0x0400: ("LAT", .f64, "Latitude, degrees, -90 to 90."),
        0x0401: ("LON", .f64, "Longitude, degrees, -180 to 180."),
        0x0402: ("ACC", .u32, "Accuracy radius, metres."),
        0x0403: ("TST", .u64, "Time of the fix, Unix seconds."),
        0x0404: ("ALT", .i32, "Altitude, metres."),
        0x0405: ("VEL", .u16, "Velocity, km/h."),
        0x0406: ("COG", .u16, "Course over ground, degrees 0-359."),
        0x0407: ("BATT", .u8, "Battery level, percent 0-100."),
        0x0408: ("DURATION", .u32, "Duration, seconds."),
        0x0500: ("TOPIC", .utf8, "Topic or topic filter, 1-1024 bytes."),
        0x0501: ("PAYLOAD", .bytes, "Publish payload."),
        0x0502: ("RETAIN", .u8, "Retain flag, 0 or 1."),
        0x1001: ("TEXT", .utf8, "Text content."),
        0x1002: ("IMAGE", .bytes, "Image content (application-defined encoding)."),
        0x1003: ("FILE_CONTENT", .bytes, "File content (application-defined encoding)."),
        0x1004: ("VOICE", .bytes, "Voice content (application-defined encoding)."),
        0x1005: ("VIDEO", .bytes, "Video content (application-defined encoding)."),
        0x1006: ("LOCATION_CARD", .bytes, "Location card content (application-defined encoding)."),
        0x1007: ("CUSTOM", .bytes, "Custom content (application-defined encoding)."),
        0xFFFF: ("CONTAINER", .container, "Nested TLV items (lists and records)."),
    ]
}
