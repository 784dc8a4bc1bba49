import IMWire

/// The gateway's rule for user and device ids, which become MQTT topic levels and parts of
/// MQTT client ids.
///
/// A valid identifier is 1 to ``maxLength`` bytes of UTF-8 and contains none of `/`, `+`,
/// `#`, `$`, NUL or any other control character (Unicode category Cc). This is stricter than
/// the wire rule (``IMWire/isValidIdentifier(_:)``: 1–128 bytes, no `/ + #` NUL): `$` is
/// refused so that no level can look like a broker-internal topic, control characters so that
/// ids stay printable in logs, and the length so that topics and client ids stay short.
public enum IMIdentifier {
    /// What an identifier names; carried by ``IMIdentifierError`` for the message.
    public enum Kind: String, Hashable, Sendable, CaseIterable {
        /// A user id (JWT `sub`, USER_ID, TO, FROM).
        case user
        /// A device id (DEVICE_ID, JWT `device`).
        case device
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
        // General category Cc: exactly U+0000–U+001F and U+007F–U+009F, fixed by Unicode's
        // stability policy. (Asking the Unicode tables costs more than the rest of a chat
        // message's checks: ids are checked for every message.)
        case 0x00...0x1F, 0x7F...0x9F: true
        default: false
        }
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
