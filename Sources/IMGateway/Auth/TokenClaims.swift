import Foundation
import JWTKit

/// The claims the gateway reads from a token. Every claim is optional here so that a missing
/// one is reported by name (``AuthError/missingClaim(_:)``); ``TokenVerifier`` checks them
/// against its injected time, so `verify(using:)` checks nothing.
struct VerifiedClaims: JWTPayload {
    var sub: String?
    /// NumericDate: seconds since 1970, possibly fractional.
    var exp: Double?
    var nbf: Double?
    var iat: Double?
    var iss: String?
    var device: String?

    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// The protected header, read before verification to insist on HS256.
struct TokenHeader: Decodable {
    var alg: String?

    /// Decodes the header of a compact JWS, or throws ``AuthError/malformed(_:)``.
    private static let decoder = JSONDecoder()

    static func decode(from token: String) throws(AuthError) -> TokenHeader {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("not three dot-separated parts") }
        guard let json = Base64URL.decode(parts[0]) else { throw .malformed("header is not base64url") }
        do {
            return try Self.decoder.decode(TokenHeader.self, from: json)
        } catch {
            throw .malformed("header is not a JSON object")
        }
    }
}

/// Unpadded base64url (RFC 4648 section 5), as JWS uses it.
enum Base64URL {
    static func decode(_ text: Substring) -> Data? {
        // Byte by byte into standard base64, padded: no string searching per character.
        var base64 = [UInt8]()
        base64.reserveCapacity(text.utf8.count + 3)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "-"): base64.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): base64.append(UInt8(ascii: "/"))
            case UInt8(ascii: "="), UInt8(ascii: "+"), UInt8(ascii: "/"): return nil
            default: base64.append(byte)
            }
        }
        base64.append(contentsOf: repeatElement(UInt8(ascii: "="), count: (4 - base64.count % 4) % 4))
        return Data(base64Encoded: Data(base64))
    }
}
