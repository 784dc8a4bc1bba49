import Foundation
import IMWire

/// Why a login token was refused, with the offending value where there is one.
public enum AuthError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The token is not a compact JWS with a JSON header and payload, its header does not name
    /// HS256, or a claim has the wrong JSON type. The reason is for logs.
    case malformed(String)
    /// The signature does not match: another secret, or a changed header or payload.
    case badSignature
    /// The `exp` claim lies in the past (beyond the leeway).
    case expired(at: Date)
    /// The `nbf` claim lies in the future (beyond the leeway).
    case notYetValid(until: Date)
    /// A required claim (`sub`, `exp`, or `iss` when an issuer is configured) is absent.
    case missingClaim(String)
    /// The `sub` claim is not a valid user id (``IMIdentifier``).
    case invalidUserID(String)
    /// The `device` claim is not a valid device id (``IMIdentifier``).
    case invalidDeviceID(String)
    /// The `iss` claim is not the configured issuer.
    case wrongIssuer(String)
    /// The token names a device (`device` claim) and the LOGIN asks for another one.
    case deviceMismatch(token: String, requested: String)

    /// The protocol code the gateway answers a refused LOGIN with.
    public var errorCode: IMErrorCode {
        switch self {
        case .expired: .tokenExpired
        case .invalidUserID, .invalidDeviceID: .invalidUserID
        case .malformed, .badSignature, .notYetValid, .missingClaim, .wrongIssuer, .deviceMismatch: .authFailed
        }
    }

    public var description: String {
        switch self {
        case .malformed(let reason): "malformed token: \(reason)"
        case .badSignature: "token signature invalid"
        case .expired(let date): "token expired at \(date.ISO8601Format())"
        case .notYetValid(let date): "token not valid before \(date.ISO8601Format())"
        case .missingClaim(let claim): "token has no \(claim) claim"
        case .invalidUserID(let id): "token subject \(id.debugDescription) is not a valid user id"
        case .invalidDeviceID(let id): "token device \(id.debugDescription) is not a valid device id"
        case .wrongIssuer(let issuer): "token issuer \(issuer.debugDescription) is not accepted"
        case .deviceMismatch(let token, let requested):
            "token is for device \(token.debugDescription), not \(requested.debugDescription)"
        }
    }
}
