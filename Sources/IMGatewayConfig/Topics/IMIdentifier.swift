import IMWire

/// The gateway's rule for user and device ids, which become MQTT topic levels and parts of
/// MQTT client ids.
///
/// A valid identifier is 1 to ``maxLength`` bytes of UTF-8 and contains none of `/`, `+`,
/// `#`, `$`, NUL, any other control character (Unicode category Cc) or a non-character
/// (U+FDD0–U+FDEF, U+xxFFFE, U+xxFFFF). This is stricter than the wire rule
/// (``IMWire/isValidIdentifier(_:)``: 1–128 bytes, no `/ + #` NUL): `$` is refused so that no
/// level can look like a broker-internal topic; control characters and non-characters because
/// a broker may refuse them in a topic or client id (MQTT 5 section 1.5.4; mosquitto closes the
/// connection), and so that ids stay printable in logs; the length so that topics and client
/// ids stay short.
public enum IMIdentifier {
    /// What an identifier names; carried by ``IMIdentifierError`` for the message.
    public enum Kind: String, Hashable, Sendable, CaseIterable {
        /// A user id (JWT `sub`, USER_ID, TO, FROM).
        case user
        /// A device id (DEVICE_ID, JWT `device`).
        case device
        /// A group id (GROUP): the rules of a user id.
        case group
    }

    /// The longest identifier in UTF-8 bytes.
    public static let maxLength = 64

    /// Throws unless `value` is a valid identifier of the given kind.
    public static func validate(_ value: String, kind: Kind) throws(IMIdentifierError) {
        let length = value.utf8.count
        guard length > 0 else { throw .empty(kind) }
        guard length <= maxLength else { throw .tooLong(kind, value, length: length) }
        for scalar in value.unicodeScalars where isForbidden(scalar) {
            throw .forbiddenCharacter(kind, value, scalar)
        }
    }

    /// Whether `value` is a valid identifier (see ``validate(_:kind:)``).
    public static func isValid(_ value: String) -> Bool {
        (try? validate(value, kind: .user)) != nil
    }

    static func isForbidden(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x2F, 0x2B, 0x23, 0x24: true  // / + # $
        default: isRefusedByBrokers(scalar)
        }
    }

    /// Whether a broker may refuse `scalar` in an MQTT UTF-8 string (a topic, a client id, a
    /// user property): a control character or a non-character, which MQTT 5 (1.5.4) says
    /// should not be there, and which mosquitto answers by closing the connection.
    static func isRefusedByBrokers(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        // General category Cc: exactly U+0000–U+001F and U+007F–U+009F, fixed by Unicode's
        // stability policy. (Asking the Unicode tables costs more than the rest of a chat
        // message's checks: ids are checked for every message.)
        case 0x00...0x1F, 0x7F...0x9F: true
        // The non-characters, also fixed: U+FDD0–U+FDEF and the last two of every plane.
        case 0xFDD0...0xFDEF: true
        case let value where value & 0xFFFE == 0xFFFE: true
        default: false
        }
    }

    /// Whether `id` can be a message id: 1 to 128 bytes of UTF-8 (the wire's rule) without a
    /// character a broker may refuse (``isRefusedByBrokers(_:)``), since the gateway puts it
    /// into a user property of the publish.
    /// What ``isValidMessageID(_:)`` wants, for refusals.
    public static let messageIDRule = "a message id is 1 to 128 bytes of UTF-8 without control characters or non-characters"

    public static func isValidMessageID(_ id: String) -> Bool {
        IMWire.messageIDLength.contains(id.utf8.count) && !id.unicodeScalars.contains(where: isRefusedByBrokers)
    }
}

/// Why a user or device id was refused, with the offending value.
public enum IMIdentifierError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The identifier is empty.
    case empty(IMIdentifier.Kind)
    /// The identifier is longer than ``IMIdentifier/maxLength`` bytes of UTF-8.
    case tooLong(IMIdentifier.Kind, String, length: Int)
    /// The identifier contains `/`, `+`, `#`, `$` or a control character.
    case forbiddenCharacter(IMIdentifier.Kind, String, Unicode.Scalar)

    /// The protocol code to answer with: always ``IMErrorCode/invalidUserID``.
    public var errorCode: IMErrorCode { .invalidUserID }

    /// The kind of identifier refused.
    public var kind: IMIdentifier.Kind {
        switch self {
        case .empty(let kind), .tooLong(let kind, _, _), .forbiddenCharacter(let kind, _, _): kind
        }
    }

    public var description: String {
        switch self {
        case .empty(let kind):
            "\(kind.rawValue) id is empty"
        case .tooLong(let kind, let value, let length):
            "\(kind.rawValue) id \(value.debugDescription) is \(length) bytes long (at most \(IMIdentifier.maxLength))"
        case .forbiddenCharacter(let kind, let value, let scalar):
            "\(kind.rawValue) id \(value.debugDescription) contains \(scalar.escaped(asASCII: true).debugDescription), "
                + "which is not allowed (no / + # $ or control characters)"
        }
    }
}
