import Foundation
import IMWire
import Testing

@testable import IMGateway
@testable import IMGatewayConfig

@Suite("Token verification")
struct TokenVerifierTests {
    static let secret = "imgw-test-secret"
    let minter = TokenMinter(secret: Self.secret)
    let verifier = TokenVerifier(secret: Self.secret)
    /// 2025-01-01T00:00:00Z.
    let now = Date(timeIntervalSince1970: 1_735_689_600)

    @Test("a minted token verifies and names the user and device")
    func roundTrip() async throws {
        let token = try await self.minter.mint(user: "alice", validFor: 3600, now: self.now)
        let device = try await self.verifier.verify(token, now: self.now)
        #expect(device == AuthenticatedDevice(userID: "alice", deviceID: nil, expiresAt: self.now + 3600, issuedAt: self.now))

        let bound = try await self.minter.mint(user: "bob", device: "phone-2", now: self.now)
        let bob = try await self.verifier.verify(bound, now: self.now)
        #expect(bob.userID == "bob" && bob.deviceID == "phone-2")
        #expect(bob.expiresAt == self.now + 86400)
    }

    @Test("the token of the protocol's test vectors (signed elsewhere) verifies")
    func protocolVectorToken() async throws {
        let token = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImlhdCI6MTczNTY4OTYwMCwiZXhwIjo0MTAyNDQ0ODAwfQ.YVKqREpRid_SqYD9mqyE1cctNyeKCCJbxDNuEwAJecc"
        let device = try await self.verifier.verify(token, now: self.now)
        #expect(device.userID == "alice")
        #expect(device.expiresAt == Date(timeIntervalSince1970: 4_102_444_800))
        await #expect(throws: AuthError.badSignature) { try await TokenVerifier(secret: "other").verify(token, now: self.now) }
    }

    @Test("expiry is checked with the leeway, and mapped to TOKEN_EXPIRED")
    func expired() async throws {
        let token = try await self.minter.mint(user: "alice", validFor: 60, now: self.now)
        _ = try await self.verifier.verify(token, now: self.now + 60 + 29)
        let error = await #expect(throws: AuthError.expired(at: self.now + 60)) {
            try await self.verifier.verify(token, now: self.now + 60 + 30)
        }
        #expect(error?.errorCode == .tokenExpired)
        await #expect(throws: AuthError.expired(at: self.now + 60)) {
            try await TokenVerifier(secret: Self.secret, leeway: 0).verify(token, now: self.now + 60)
        }
    }

    @Test("nbf in the future is refused beyond the leeway")
    func notYetValid() async throws {
        struct Claims: Codable, Sendable { var sub = "alice"; var exp: Int64; var nbf: Int64 }
        let start = Int64(self.now.timeIntervalSince1970) + 100
        let token = try await self.minter.sign(claims: Claims(exp: start + 3600, nbf: start))
        await #expect(throws: AuthError.notYetValid(until: self.now + 100)) { try await self.verifier.verify(token, now: self.now) }
        _ = try await self.verifier.verify(token, now: self.now + 70)
    }

    @Test("a token signed with another secret is refused as AUTH_FAILED")
    func wrongSecret() async throws {
        let token = try await TokenMinter(secret: "another-secret").mint(user: "alice", now: self.now)
        let error = await #expect(throws: AuthError.badSignature) { try await self.verifier.verify(token, now: self.now) }
        #expect(error?.errorCode == .authFailed)
    }

    @Test("a changed payload or header breaks the signature")
    func tampered() async throws {
        let token = try await self.minter.mint(user: "alice", now: self.now)
        let parts = token.split(separator: ".").map(String.init)
        let forged = try await self.minter.mint(user: "mallory", now: self.now).split(separator: ".").map(String.init)
        await #expect(throws: AuthError.badSignature) {
            try await self.verifier.verify([parts[0], forged[1], parts[2]].joined(separator: "."), now: self.now)
        }
        // Same header JSON with other whitespace: still a different signing input.
        let header = Self.base64URL(#"{"typ":"JWT", "alg":"HS256"}"#)
        await #expect(throws: AuthError.badSignature) {
            try await self.verifier.verify([header, parts[1], parts[2]].joined(separator: "."), now: self.now)
        }
    }

    @Test("only HS256 is accepted; alg none and other algorithms are malformed")
    func algorithms() async throws {
        let token = try await self.minter.mint(user: "alice", now: self.now)
        let parts = token.split(separator: ".").map(String.init)
        for alg in ["none", "HS512", "RS256"] {
            let header = Self.base64URL(#"{"alg":"\#(alg)","typ":"JWT"}"#)
            for signature in [parts[2], ""] {
                await #expect(throws: AuthError.malformed("alg \(alg) is not HS256")) {
                    try await self.verifier.verify([header, parts[1], signature].joined(separator: "."), now: self.now)
                }
            }
        }
    }

    @Test("garbage is malformed", arguments: ["", "abc", "a.b", "a.b.c.d", "!!!.e30.sig", "e30.e30."])
    func malformed(_ token: String) async {
        let error = await #expect(throws: AuthError.self) { try await self.verifier.verify(token, now: self.now) }
        guard case .malformed? = error else {
            Issue.record("expected malformed, got \(String(describing: error))")
            return
        }
        #expect(error?.errorCode == .authFailed)
    }

    @Test("sub and exp are required")
    func missingClaims() async throws {
        struct NoSub: Codable, Sendable { var exp: Int64 = 4_102_444_800 }
        struct NoExp: Codable, Sendable { var sub = "alice" }
        await #expect(throws: AuthError.missingClaim("sub")) {
            try await self.verifier.verify(try await self.minter.sign(claims: NoSub()), now: self.now)
        }
        await #expect(throws: AuthError.missingClaim("exp")) {
            try await self.verifier.verify(try await self.minter.sign(claims: NoExp()), now: self.now)
        }
    }

    @Test("a claim of the wrong type is malformed")
    func wrongClaimType() async throws {
        struct NumericSub: Codable, Sendable { var sub = 42; var exp: Int64 = 4_102_444_800 }
        let error = await #expect(throws: AuthError.self) {
            try await self.verifier.verify(try await self.minter.sign(claims: NumericSub()), now: self.now)
        }
        guard case .malformed? = error else {
            Issue.record("got \(String(describing: error))")
            return
        }
    }

    @Test("user and device ids follow the identifier rule")
    func invalidIDs() async throws {
        struct Claims: Codable, Sendable { var sub: String; var exp: Int64 = 4_102_444_800; var device: String? }
        for bad in ["a/b", "", "x+y", "$SYS", String(repeating: "u", count: 65)] {
            let error = await #expect(throws: AuthError.invalidUserID(bad)) {
                try await self.verifier.verify(try await self.minter.sign(claims: Claims(sub: bad)), now: self.now)
            }
            #expect(error?.errorCode == .invalidUserID)
            await #expect(throws: AuthError.invalidDeviceID(bad)) {
                try await self.verifier.verify(try await self.minter.sign(claims: Claims(sub: "alice", device: bad)), now: self.now)
            }
        }
        await #expect(throws: AuthError.invalidUserID("a/b")) { try await self.minter.mint(user: "a/b") }
    }

    @Test("a configured issuer is required and compared")
    func issuer() async throws {
        let verifier = TokenVerifier(secret: Self.secret, issuer: "https://auth.example")
        let good = try await TokenMinter(secret: Self.secret, issuer: "https://auth.example").mint(user: "alice", now: self.now)
        #expect(try await verifier.verify(good, now: self.now).userID == "alice")
        let other = try await TokenMinter(secret: Self.secret, issuer: "https://evil.example").mint(user: "alice", now: self.now)
        let error = await #expect(throws: AuthError.wrongIssuer("https://evil.example")) { try await verifier.verify(other, now: self.now) }
        #expect(error?.errorCode == .authFailed)
        let none = try await self.minter.mint(user: "alice", now: self.now)
        await #expect(throws: AuthError.missingClaim("iss")) { try await verifier.verify(none, now: self.now) }
        // Without a configured issuer, any issuer is accepted.
        #expect(try await self.verifier.verify(other, now: self.now).userID == "alice")
    }

    @Test("the LOGIN's device id must agree with a device-bound token")
    func loginDevice() throws {
        let free = AuthenticatedDevice(userID: "alice", expiresAt: self.now)
        #expect(try free.deviceID(forLogin: "phone-1") == "phone-1")
        #expect(try free.deviceID(forLogin: nil) == nil)
        #expect(throws: AuthError.invalidDeviceID("a/b")) { try free.deviceID(forLogin: "a/b") }
        let bound = AuthenticatedDevice(userID: "alice", deviceID: "phone-1", expiresAt: self.now)
        #expect(try bound.deviceID(forLogin: nil) == "phone-1")
        #expect(try bound.deviceID(forLogin: "phone-1") == "phone-1")
        #expect(throws: AuthError.deviceMismatch(token: "phone-1", requested: "tablet")) { try bound.deviceID(forLogin: "tablet") }
    }

    static func base64URL(_ text: String) -> String {
        Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

@Suite("Token revocations")
struct TokenRevocationsTests {
    let now = Date(timeIntervalSince1970: 1_735_689_600)

    func token(issuedAt: Date?) -> AuthenticatedDevice {
        AuthenticatedDevice(userID: "bob", expiresAt: now + 3600, issuedAt: issuedAt)
    }

    @Test("tokens issued before the cutoff second are refused, from that second on they are not; other users are untouched")
    func cutoff() {
        let revocations = TokenRevocations()
        #expect(revocations.refusal(of: token(issuedAt: now - 10)) == nil)
        revocations.revoke(user: "bob", issuedBefore: 1_735_689_600)
        #expect(revocations.refusal(of: token(issuedAt: now - 1))?.contains("revoked") == true)
        #expect(revocations.refusal(of: token(issuedAt: now)) == nil, "issued in the second of the revocation")
        #expect(revocations.refusal(of: token(issuedAt: now + 0.9)) == nil)
        #expect(revocations.refusal(of: token(issuedAt: nil))?.contains("no iat") == true, "no iat: cannot tell, refused")
        #expect(revocations.refusal(of: AuthenticatedDevice(userID: "alice", expiresAt: now, issuedAt: now - 100)) == nil)
    }

    @Test("a later revocation moves the cutoff on, an earlier one (arriving late) does not move it back; forgetting lifts it")
    func order() {
        let revocations = TokenRevocations()
        revocations.revoke(user: "bob", issuedBefore: 200)
        revocations.revoke(user: "bob", issuedBefore: 100)
        #expect(revocations.cutoff(user: "bob") == 200)
        revocations.revoke(user: "bob", issuedBefore: 300)
        #expect(revocations.cutoff(user: "bob") == 300)
        revocations.forget(user: "bob")
        #expect(revocations.cutoff(user: "bob") == nil)
    }
}
