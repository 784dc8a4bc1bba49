import Foundation
import JWTKit

extension HMACKey {
    /// The HS256 key for a configured secret (its UTF-8 bytes).
    ///
    /// jwt-kit asserts (and plans to require) keys of at least 32 bytes, but shorter secrets are
    /// in use (the protocol's test vectors use a 16-byte one, and the default secret has 23).
    /// HMAC pads any key shorter than the hash's 64-byte block with zero bytes (RFC 2104), so
    /// padding the secret to 32 bytes ourselves yields exactly the same signatures. Short
    /// secrets stay weak: ``GatewayConfiguration/warnings()`` says so.
    package static func gatewayKey(secret: String) -> HMACKey {
        var bytes = Array(secret.utf8)
        if bytes.count < 32 { bytes += Array(repeating: 0, count: 32 - bytes.count) }
        return HMACKey(from: bytes)
    }
}
