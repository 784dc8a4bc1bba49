import Foundation
import IMWire
import JWTKit

/// Verifies login tokens: HS256 JWTs whose `sub` claim is the user id.
///
/// Claims: `sub` (required, a valid user id), `exp` (required), `nbf` (optional), `iss`
/// (required and compared when an issuer is configured), `device` (optional, a valid device
/// id). `exp` and `nbf` are compared with the given leeway for clock skew. The header must
/// name `HS256`; the signature is checked before any claim.
///
/// ```swift
/// let verifier = TokenVerifier(secret: config.auth.jwtSecret, issuer: config.auth.issuer)
/// let device = try await verifier.verify(login.token)   // throws(AuthError)
/// ```
public struct TokenVerifier: Sendable {
    /// The key as jwt-kit wants it, made once by a task the initializer starts (adding a key
    /// is actor-isolated, so it cannot happen in this synchronous initializer).
    private let keys: Task<JWTKeyCollection, Never>
    /// The required `iss` claim, or `nil` to accept any issuer.
    public let issuer: String?
    /// Seconds of clock skew tolerated on `exp` and `nbf`.
    public let leeway: Int

    /// Creates a verifier for tokens signed with `secret`.
    public init(secret: String, issuer: String? = nil, leeway: Int = 30) {
        let key = HMACKey.gatewayKey(secret: secret)
        self.keys = Task {
            let keys = JWTKeyCollection()
            await keys.add(hmac: key, digestAlgorithm: .sha256)
            return keys
        }
        self.issuer = issuer
        self.leeway = leeway
    }

    /// Verifies `token` now.
    public func verify(_ token: String) async throws(AuthError) -> AuthenticatedDevice {
        try await self.verify(token, now: Date())
    }

    /// Verifies `token` as of `now`.
    public func verify(_ token: String, now: Date) async throws(AuthError) -> AuthenticatedDevice {
        let header = try TokenHeader.decode(from: token)
        guard header.alg == "HS256" else { throw .malformed("alg \(header.alg ?? "(none)") is not HS256") }
        let claims = try await self.verifiedClaims(token)

        guard let userID = claims.sub else { throw .missingClaim("sub") }
        guard let exp = claims.exp else { throw .missingClaim("exp") }
        if let issuer = self.issuer {
            guard let iss = claims.iss else { throw .missingClaim("iss") }
            guard iss == issuer else { throw .wrongIssuer(iss) }
        }
        let leeway = TimeInterval(self.leeway)
        let now = now.timeIntervalSince1970
        if let nbf = claims.nbf, now + leeway < nbf { throw .notYetValid(until: Date(timeIntervalSince1970: nbf)) }
        guard now < exp + leeway else { throw .expired(at: Date(timeIntervalSince1970: exp)) }
        guard IMIdentifier.isValid(userID) else { throw .invalidUserID(userID) }
        if let device = claims.device, !IMIdentifier.isValid(device) { throw .invalidDeviceID(device) }
        return AuthenticatedDevice(
            userID: userID, deviceID: claims.device, expiresAt: Date(timeIntervalSince1970: exp),
            issuedAt: claims.iat.map { Date(timeIntervalSince1970: $0) })
    }

    /// Checks the signature and decodes the claims, mapping jwt-kit's errors.
    private func verifiedClaims(_ token: String) async throws(AuthError) -> VerifiedClaims {
        let keys = await self.keys.value
        do {
            return try await keys.verify(token, as: VerifiedClaims.self)
        } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
            throw .badSignature
        } catch let error as JWTError {
            throw .malformed(error.reason ?? error.errorType.description)
        } catch {
            throw .malformed(String(describing: error))
        }
    }
}
