/// A TLV tag (u16). Known tags are listed in ``allKnown`` with their names and value types.
///
/// Ranges: `0x0001–0x00FF` seed tags, `0x0100–0x01FF` session, `0x0200–0x02FF` messaging,
/// `0x0300–0x03FF` presence, `0x0400–0x04FF` location, `0x0500–0x05FF` pub/sub,
/// `0x1001–0x1007` content, `0xF000–0xFFFE` application-defined, `0xFFFF` container.
public struct IMTag: RawRepresentable, Hashable, Sendable, Comparable, ExpressibleByIntegerLiteral,
    CustomStringConvertible
{
    /// The tag on the wire.
    public var rawValue: UInt16

    /// Wraps a tag.
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// Wraps a tag.
    public init(_ rawValue: UInt16) { self.rawValue = rawValue }

    /// Wraps a tag literal, e.g. `0xF001`.
    public init(integerLiteral value: UInt16) { self.rawValue = value }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    /// `0xF000–0xFFFE`: application-defined; the gateway passes such items through unchanged.
    public var isApplicationDefined: Bool { self.rawValue >= 0xF000 && self.rawValue != 0xFFFF }

    /// `0x1001–0x1007`: a chat content item.
    public var isContent: Bool { (0x1001...0x1007).contains(self.rawValue) }

    /// `NAME (0xNNNN)`, e.g. `AUTH_TOKEN (0x0100)`.
    public var description: String { "\(self.name ?? (self.isApplicationDefined ? "APP" : "UNKNOWN")) (0x\(hex(self.rawValue, 4)))" }
}

extension IMTag {
    // MARK: Seed tags (0x0001–0x00FF)

    /// Version request: u16 `major<<8|minor`, u16 feature bits.
    public static let versionRequest: IMTag = 0x0001
    /// Version response: u16 `major<<8|minor`, u16 feature bits.
    public static let versionResponse: IMTag = 0x0002
    /// Seed read receipt (u32 sequence). Not used by this protocol; ignored.
    public static let seedReadReceipt: IMTag = 0x0010
    /// Group id (UTF-8): the group a CHAT goes to, a DELIVERY or TYPING comes from.
    public static let group: IMTag = 0x0011
    /// Seed file item. Reserved.
    public static let file: IMTag = 0x0012
    /// User status (u8): 0 offline, 1 online.
    public static let userStatus: IMTag = 0x0020
    /// Typing state (u8), see ``TypingState``.
    public static let typing: IMTag = 0x0021

    // MARK: Session (0x0100–0x01FF)

    /// Auth token (UTF-8): an HS256 JWT.
    public static let authToken: IMTag = 0x0100
    /// Device id (UTF-8).
    public static let deviceID: IMTag = 0x0101
    /// User id (UTF-8).
    public static let userID: IMTag = 0x0102
    /// Error code (u16), see ``IMErrorCode``.
    public static let errorCode: IMTag = 0x0103
    /// Error message (UTF-8), for humans.
    public static let errorMessage: IMTag = 0x0104
    /// Operation (u16), see ``IMOperation``.
    public static let operation: IMTag = 0x0105
    /// Sequence (u32) of the frame this frame answers.
    public static let refSequence: IMTag = 0x0106
    /// Heartbeat interval the gateway expects, in seconds (u16).
    public static let heartbeatInterval: IMTag = 0x0107
    /// The receiver's body limit in bytes (u32).
    public static let maxBodyLength: IMTag = 0x0108
    /// In LOGIN (u8 flag): 1 (the default when absent) sends this device RECEIPT_NOTICE frames,
    /// 0 does not.
    public static let receiptNotices: IMTag = 0x0109
    /// In LOGIN_OK and in the ACK of a TOKEN_REFRESH (u64): when the session's token expires,
    /// its `exp` claim in Unix milliseconds.
    public static let tokenExpiry: IMTag = 0x010A
    /// In a negative ACK RATE_LIMITED (u32): milliseconds to wait before sending that kind of
    /// request again.
    public static let retryAfter: IMTag = 0x010B
    /// In LOGIN (u8 flag): 1 (the default when absent) sends this device carbons (copies of
    /// what the user's other devices send), 0 does not.
    public static let carbons: IMTag = 0x010C
    /// In LOGIN_OK (u8 flag): 1, the broker kept the device's session (what was queued
    /// while it was away follows); 0, a new session (nothing was kept: whatever was queued
    /// for the device before is gone).
    public static let sessionResumed: IMTag = 0x010D
    /// In LOGIN_OK and the ACK of a SYNC (u8, ``IMSyncStatus``): how the gateway took the
    /// device's position in its stream.
    public static let syncStatus: IMTag = 0x010E

    // MARK: Messaging (0x0200–0x02FF)

    /// Recipient user id (UTF-8).
    public static let to: IMTag = 0x0200
    /// Sender user id (UTF-8).
    public static let from: IMTag = 0x0201
    /// Message id (UTF-8), chosen by the sending client, unique per sender.
    public static let messageID: IMTag = 0x0202
    /// Server time, Unix milliseconds (u64).
    public static let serverTime: IMTag = 0x0203
    /// Resend flag (u8): 1 if this message may have been sent before.
    public static let resend: IMTag = 0x0204
    /// QoS (u8): 0, 1 or 2.
    public static let qos: IMTag = 0x0205
    /// Receipt kind (u8): 1 delivered, 2 read.
    public static let receiptKind: IMTag = 0x0206
    /// In a DELIVERY (u8 flag): 1, a copy of a message the user sent from another of their
    /// devices (a carbon); it carries TO or GROUP, the conversation.
    public static let carbon: IMTag = 0x0207
    /// An offset in a user's stream of stored messages (u64). In a DELIVERY: the message's
    /// place in the receiving user's stream; in the ACK of a CHAT: its place in the sender's
    /// own stream; in LOGIN and SYNC: the device has every message up to it; in LOGIN_OK and
    /// the ACK of a SYNC: where the gateway catches the device up from, or has caught it up to.
    public static let streamOffset: IMTag = 0x0208
    /// The epoch of the gateway's message archive (u64): offsets of one epoch mean nothing in
    /// another. With STREAM_OFFSET in LOGIN and SYNC: the epoch the device's offset is of.
    public static let streamEpoch: IMTag = 0x0209
    /// In a DELIVERY (u8 flag): 1, replayed from the archive (the device had missed it).
    public static let archived: IMTag = 0x020A
    /// In HISTORY and CONVERSATIONS (u64): older than this offset of the user's stream.
    public static let before: IMTag = 0x020B
    /// In HISTORY (u64): newer than this offset of the user's stream.
    public static let after: IMTag = 0x020C
    /// In HISTORY and CONVERSATIONS (u16): at most this many.
    public static let limit: IMTag = 0x020D
    /// In HISTORY_PAGE and CONVERSATION_LIST (u8 flag): 1, nothing is left in the page's
    /// direction.
    public static let complete: IMTag = 0x020E
    /// Messages from others after the read marker (u32).
    public static let unread: IMTag = 0x020F
    /// A read marker (u64): the user has read the conversation up to this offset of its stream.
    public static let readThrough: IMTag = 0x0210
    /// In a DELIVERY or a history record (u8 flag): 1, the sender deleted this message for
    /// everyone; it has no content.
    public static let deleted: IMTag = 0x0211

    // MARK: Presence (0x0300–0x03FF)

    /// Last seen, Unix milliseconds (u64).
    public static let lastSeen: IMTag = 0x0300

    // MARK: Location (0x0400–0x04FF), OwnTracks names

    /// `lat`: latitude in degrees (f64).
    public static let latitude: IMTag = 0x0400
    /// `lon`: longitude in degrees (f64).
    public static let longitude: IMTag = 0x0401
    /// `acc`: accuracy radius in metres (u32).
    public static let accuracy: IMTag = 0x0402
    /// `tst`: time of the fix, Unix seconds (u64).
    public static let locationTime: IMTag = 0x0403
    /// `alt`: altitude in metres (i32).
    public static let altitude: IMTag = 0x0404
    /// `vel`: velocity in km/h (u16).
    public static let velocity: IMTag = 0x0405
    /// `cog`: course over ground in degrees (u16).
    public static let course: IMTag = 0x0406
    /// `batt`: battery level in percent (u8).
    public static let battery: IMTag = 0x0407
    /// Duration in seconds (u32).
    public static let duration: IMTag = 0x0408

    // MARK: Pub/sub (0x0500–0x05FF)

    /// Topic or topic filter (UTF-8).
    public static let topic: IMTag = 0x0500
    /// Payload (bytes).
    public static let payload: IMTag = 0x0501
    /// Retain flag (u8).
    public static let retain: IMTag = 0x0502

    // MARK: Content (0x1001–0x1007)

    /// Text content (UTF-8).
    public static let text: IMTag = 0x1001
    /// Image content (bytes, application-defined encoding).
    public static let image: IMTag = 0x1002
    /// File content (bytes, application-defined encoding).
    public static let fileContent: IMTag = 0x1003
    /// Voice content (bytes, application-defined encoding).
    public static let voice: IMTag = 0x1004
    /// Video content (bytes, application-defined encoding).
    public static let video: IMTag = 0x1005
    /// Location card content (bytes, application-defined encoding).
    public static let locationCard: IMTag = 0x1006
    /// Custom content (bytes, application-defined encoding).
    public static let custom: IMTag = 0x1007

    // MARK: Structure

    /// A container: its value is nested TLV.
    public static let container: IMTag = 0xFFFF
}
