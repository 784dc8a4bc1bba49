import Foundation

/// Who a verified token says is logging in.
public struct AuthenticatedDevice: Hashable, Sendable {
    /// The user id, from the `sub` claim; a valid ``IMIdentifier``.
    public var userID: String
    /// The device id, from the optional `device` claim; a valid ``IMIdentifier`` when present.
    /// A token with a device claim is good for that device only.
    public var deviceID: String?
    /// When the token expires (the `exp` claim, without leeway).
    public var expiresAt: Date
    /// When the token was issued (the optional `iat` claim), for revocations.
    public var issuedAt: Date?

    /// Creates an authenticated device.
    public init(userID: String, deviceID: String? = nil, expiresAt: Date, issuedAt: Date? = nil) {
        self.userID = userID
        self.deviceID = deviceID
        self.expiresAt = expiresAt
        self.issuedAt = issuedAt
    }
}

extension AuthenticatedDevice {
    /// The device id a LOGIN ends up with: the one it asks for (DEVICE_ID), else the token's,
    /// else `nil` (the gateway then assigns one).
    ///
    /// Throws ``AuthError/invalidDeviceID(_:)`` for an invalid requested id and
    /// ``AuthError/deviceMismatch(token:requested:)`` when the token is bound to another device.
    public func deviceID(forLogin requested: String?) throws(AuthError) -> String? {
        guard let requested else { return self.deviceID }
        guard IMIdentifier.isValid(requested) else { throw .invalidDeviceID(requested) }
        if let bound = self.deviceID, bound != requested { throw .deviceMismatch(token: bound, requested: requested) }
        return requested
    }
}
