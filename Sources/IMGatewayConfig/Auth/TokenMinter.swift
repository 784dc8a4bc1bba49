import Foundation
import JWTKit

/// Issues login tokens that ``TokenVerifier`` accepts: for tests, development and the
/// `imgw token` command. Production tokens come from the application's own auth service.
public struct TokenMinter: Sendable {
    let key: HMACKey
    /// The `iss` claim written into tokens, if any.
    public let issuer: String?

    /// Creates a minter signing with `secret` (HS256).
    public init(secret: String, issuer: String? = nil) {
        self.key = HMACKey.gatewayKey(secret: secret)
        self.issuer = issuer
    }

    /// A token for `user` (and `device`, if given), valid for `seconds` from `now`.
    ///
    /// Throws ``AuthError/invalidUserID(_:)`` or ``AuthError/invalidDeviceID(_:)`` for ids the
    /// gateway would refuse; other errors come from signing.
    public func mint(user: String, device: String? = nil, validFor seconds: Int = 86400, now: Date = Date()) async throws
        -> String
    {
        guard IMIdentifier.isValid(user) else { throw AuthError.invalidUserID(user) }
        if let device, !IMIdentifier.isValid(device) { throw AuthError.invalidDeviceID(device) }
        let issuedAt = Int64(now.timeIntervalSince1970.rounded(.down))
        let claims = MintedClaims(sub: user, exp: issuedAt + Int64(seconds), iat: issuedAt, iss: self.issuer, device: device)
        let keys = JWTKeyCollection()
        await keys.add(hmac: self.key, digestAlgorithm: .sha256)
        return try await keys.sign(claims)
    }
}

extension TokenMinter {
    /// Signs arbitrary claims as an HS256 JWT, e.g. tokens lacking a claim for tests.
    func sign<Claims: Codable & Sendable>(claims: Claims) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(hmac: self.key, digestAlgorithm: .sha256)
        return try await keys.sign(AnyClaims(claims: claims))
    }
}

/// Any `Codable` claims as a JWT payload, encoded flat.
private struct AnyClaims<Claims: Codable & Sendable>: JWTPayload {
    var claims: Claims

    init(claims: Claims) { self.claims = claims }
    init(from decoder: any Decoder) throws { self.claims = try Claims(from: decoder) }
    func encode(to encoder: any Encoder) throws { try self.claims.encode(to: encoder) }
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// The claims ``TokenMinter`` writes: integer NumericDates.
struct MintedClaims: JWTPayload {
    var sub: String
    var exp: Int64
    var iat: Int64
    var iss: String?
    var device: String?

    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
