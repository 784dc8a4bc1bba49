/// A protocol error code (tag 0x0103, u16), sent in ERROR and KICK frames and negative ACKs.
///
/// Ranges: 1xx framing (always fatal), 2xx session and authentication, 3xx request,
/// 5xx server. Unknown codes are kept as they are, so newer peers can add codes.
public struct IMErrorCode: RawRepresentable, Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The code on the wire.
    public var rawValue: UInt16

    /// Wraps a code.
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// Wraps a code.
    public init(_ rawValue: UInt16) { self.rawValue = rawValue }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    // MARK: 1xx framing: the connection is closed.

    /// The frame does not start with `0xDECAFBAD`.
    public static let badMagic = IMErrorCode(100)
    /// The version major is not 1.
    public static let unsupportedVersion = IMErrorCode(101)
    /// The CRC-32 does not match the body as transmitted.
    public static let badChecksum = IMErrorCode(102)
    /// The body (announced or inflated) is above the limit.
    public static let bodyTooLarge = IMErrorCode(103)
    /// The TLV body is malformed or the body length impossible.
    public static let malformedFrame = IMErrorCode(104)
    /// The frame type is unknown.
    public static let unknownFrameType = IMErrorCode(105)
    /// The encrypt type is not 0 or 1.
    public static let unsupportedEncryption = IMErrorCode(106)
    /// The compress type is unknown or not accepted.
    public static let unsupportedCompression = IMErrorCode(107)
    /// The compressed body is not one valid zlib stream.
    public static let decompressionFailed = IMErrorCode(108)

    // MARK: 2xx session and authentication

    /// A request other than HELLO, LOGIN or HEARTBEAT arrived before login succeeded.
    public static let notLoggedIn = IMErrorCode(200)
    /// The token was refused (bad signature, wrong issuer or audience): a login refusal, or
    /// a negative ACK of TOKEN_REFRESH (which leaves the connection open).
    public static let authFailed = IMErrorCode(201)
    /// The token has expired: at login, as a KICK reason once the session's token expired, or
    /// in a negative ACK of a TOKEN_REFRESH whose new token already expired.
    public static let tokenExpired = IMErrorCode(202)
    /// The user may not do this (topic, audience, watched user; a TOKEN_REFRESH token for
    /// another user or device).
    public static let forbidden = IMErrorCode(203)
    /// A user, device or group id (USER_ID, DEVICE_ID, TO, FROM, GROUP) is empty, too long,
    /// not UTF-8, or contains a character the receiver refuses (`/`, `+`, `#`, NUL; imgw also
    /// `$`, controls and non-characters, and more than 64 bytes).
    public static let invalidUserID = IMErrorCode(204)
    /// No LOGIN arrived in time after the connection opened.
    public static let loginTimeout = IMErrorCode(205)
    /// No frame arrived within the idle timeout, or a delivery was not ACKed within the
    /// delivery ACK timeout (KICK reason; the KICK's message says which).
    public static let idleTimeout = IMErrorCode(206)
    /// The same device logged in on another connection.
    public static let sessionTakenOver = IMErrorCode(207)
    /// LOGIN on a connection that is already logged in.
    public static let alreadyLoggedIn = IMErrorCode(208)
    /// The app's backend ended the session through the gateway's server API (KICK reason;
    /// the KICK's message carries its reason).
    public static let disconnected = IMErrorCode(209)

    // MARK: 3xx request: the connection stays open.

    /// A required item is missing or an item's value is invalid.
    public static let badRequest = IMErrorCode(300)
    /// The operation is unknown.
    public static let unknownOperation = IMErrorCode(301)
    /// Too many frames or requests; retry later.
    public static let rateLimited = IMErrorCode(302)
    /// The topic or filter is invalid or outside the allowed topic space.
    public static let invalidTopic = IMErrorCode(303)
    /// The requested QoS is not supported.
    public static let qosNotSupported = IMErrorCode(304)
    /// The chat's MESSAGE_ID was accepted before for another message (another recipient,
    /// content or application items); this one was not sent. Send it with a new id.
    public static let messageIDReused = IMErrorCode(305)
    /// The device has as many subscriptions (or presence or location watches) as the gateway
    /// allows; it unsubscribes (unwatches) first.
    public static let limitReached = IMErrorCode(306)

    // MARK: 5xx server

    /// An unexpected failure in the gateway.
    public static let internalError = IMErrorCode(500)
    /// The gateway is shutting down (KICK reason).
    public static let serverShuttingDown = IMErrorCode(501)
    /// The broker did not accept the message; resend it later with the resend flag.
    public static let brokerUnavailable = IMErrorCode(502)
    /// The gateway's message archive cannot store the message (or be read) now; send it again
    /// after RETRY_AFTER. Nothing was stored or sent.
    public static let storeUnavailable = IMErrorCode(503)

    /// Every code defined by this version, in ascending order.
    public static let allKnown: [IMErrorCode] = [
        .badMagic, .unsupportedVersion, .badChecksum, .bodyTooLarge, .malformedFrame, .unknownFrameType,
        .unsupportedEncryption, .unsupportedCompression, .decompressionFailed,
        .notLoggedIn, .authFailed, .tokenExpired, .forbidden, .invalidUserID, .loginTimeout, .idleTimeout,
        .sessionTakenOver, .alreadyLoggedIn, .disconnected,
        .badRequest, .unknownOperation, .rateLimited, .invalidTopic, .qosNotSupported, .messageIDReused, .limitReached,
        .internalError, .serverShuttingDown, .brokerUnavailable, .storeUnavailable,
    ]

    /// The upper-snake-case name used in the protocol document, or `nil` for an unknown code.
    public var name: String? { Self.catalog[self.rawValue]?.name }

    /// How the gateway reacts, as documented: whether it closes the connection after sending this code.
    public var closesConnection: Bool { Self.catalog[self.rawValue]?.closes ?? false }

    /// A one-line English meaning, or `nil` for an unknown code.
    public var meaning: String? { Self.catalog[self.rawValue]?.meaning }

    /// `NAME (code)`, e.g. `BAD_CRC (102)`.
    public var description: String { "\(self.name ?? "UNKNOWN") (\(self.rawValue))" }

    private static let catalog: [UInt16: (name: String, closes: Bool, meaning: String)] = [
        100: ("BAD_MAGIC", true, "The frame does not start with 0xDECAFBAD."),
        101: ("UNSUPPORTED_VERSION", true, "The header's version major is not 1."),
        102: ("BAD_CRC", true, "The header CRC-32 does not match the body as transmitted."),
        103: ("BODY_TOO_LARGE", true, "The announced or inflated body length is above the limit."),
        104: ("MALFORMED_FRAME", true, "Malformed TLV, impossible body length, or a stream cut inside a frame."),
        105: ("UNKNOWN_TYPE", true, "The header type is not 0 to 4."),
        106: ("UNSUPPORTED_ENCRYPTION", true, "The encrypt type is not 0 or 1."),
        107: ("UNSUPPORTED_COMPRESSION", true, "The compress type is unknown, or zlib is not accepted."),
        108: ("DECOMPRESSION_FAILED", true, "The body is not exactly one valid zlib stream."),
        200: ("NOT_LOGGED_IN", false, "This request needs a successful LOGIN first."),
        201: ("AUTH_FAILED", true, "The token was refused (LOGIN refusal; as a negative ACK of TOKEN_REFRESH the connection stays open)."),
        202: ("TOKEN_EXPIRED", true, "The token has expired (LOGIN refusal or KICK reason; as a negative ACK of TOKEN_REFRESH the connection stays open)."),
        203: ("FORBIDDEN", false, "The user may not do this (topic, audience, watched user; a TOKEN_REFRESH token for another user or device)."),
        204: ("INVALID_USER_ID", false, "A user, device or group id (USER_ID, DEVICE_ID, TO, FROM, GROUP) is empty, too long, not UTF-8, or contains a character the receiver refuses (/ + # NUL; imgw also $, controls, non-characters, and over 64 bytes)."),
        205: ("LOGIN_TIMEOUT", true, "No LOGIN arrived in time after the connection opened."),
        206: ("IDLE_TIMEOUT", true, "No frame arrived within the idle timeout, or a DELIVERY (or QoS 1/2 PUBLISH) was not ACKed within the delivery ACK timeout (KICK reason; ERROR_MESSAGE says which)."),
        207: ("SESSION_TAKEN_OVER", true, "The same device logged in on another connection (KICK reason)."),
        208: ("ALREADY_LOGGED_IN", false, "LOGIN on a connection that is already logged in."),
        209: ("DISCONNECTED", true, "The app's backend ended the session through the gateway's server API (KICK reason; ERROR_MESSAGE carries its reason)."),
        300: ("BAD_REQUEST", false, "A required item is missing or an item's value is invalid."),
        301: ("UNKNOWN_OPERATION", false, "The operation is unknown for this frame type."),
        302: ("RATE_LIMITED", false, "Too many frames or requests; retry later."),
        303: ("INVALID_TOPIC", false, "The topic or filter is invalid or outside the allowed topic space."),
        304: ("QOS_NOT_SUPPORTED", false, "The requested QoS is not supported."),
        305: ("MESSAGE_ID_REUSED", false, "The MESSAGE_ID was accepted before for another message (recipient or content); this one was not sent."),
        306: ("LIMIT_REACHED", false, "The device has as many subscriptions or watches as the gateway allows; unsubscribe or unwatch first."),
        500: ("INTERNAL_ERROR", false, "An unexpected failure in the gateway."),
        501: ("SERVER_SHUTTING_DOWN", true, "The gateway is shutting down (KICK reason)."),
        502: ("BROKER_UNAVAILABLE", false, "The broker did not accept the message; resend it later."),
        503: ("STORE_UNAVAILABLE", false, "The message archive cannot store the message (or be read) now; nothing was sent: resend it after RETRY_AFTER."),
    ]
}
