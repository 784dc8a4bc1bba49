import CMessageTag
import Crypto
import Foundation
import Mosquitto

/// Tells messages the gateways wrote on the broker from anything else written there: each
/// chat, receipt, location share and position a gateway publishes carries an HMAC-SHA256 of
/// its topic and payload (truncated to 128 bits) as its MQTT v5 correlation data, and a gateway
/// forwards such a message to a device only when it checks out. (Correlation data rather than a
/// user property: it is read out of libmosquitto with one copy, and nothing else is.)
///
/// The key is derived (HKDF-SHA256) from `auth.jwt_secret`, which every gateway of a
/// deployment shares already: a client that can write to the broker but does not hold the
/// secret cannot produce it. (Whoever holds the secret can mint tokens anyway.)
///
/// The HMAC is computed by `CMessageTag` over OpenSSL's SHA-256, from hash states set up once
/// for the key: `Crypto.HMAC` allocates and copies hash contexts for every message, which
/// costs more than twice as much. A test holds the tags equal to `Crypto.HMAC`'s.
public struct MessageAuthenticator: Sendable {
    /// Bytes of the tag.
    public static let tagLength = 16

    /// The HMAC key, as hash states after its two pad blocks.
    private let key: cmt_hmac_key

    /// The authenticator of the gateways that share `secret` (`auth.jwt_secret`).
    public init(secret: String) {
        self.init(key: HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: Array(secret.utf8)), info: Array("imgw broker messages v1".utf8),
            outputByteCount: 32))
    }

    /// The authenticator with a 32-byte HMAC key (what ``init(secret:)`` derives).
    init(key: SymmetricKey) {
        precondition(key.bitCount == 256, "a 32-byte key")
        var prepared = cmt_hmac_key()
        let status = key.withUnsafeBytes { cmt_hmac_key_init(&prepared, $0.baseAddress, $0.count) }
        precondition(status == 0, "a key of at most one SHA-256 block")
        self.key = prepared
    }

    /// The tag of a message on `topic` with `payload`.
    public func tag(topic: String, payload: [UInt8]) -> [UInt8] {
        withMAC(topic: topic, payload: payload) { Array($0.prefix(Self.tagLength)) }
    }

    /// Whether `message` carries the tag of its topic and payload as correlation data.
    public func isAuthentic(_ message: MosquittoMessage) -> Bool {
        guard let tag = message.properties.correlationData else { return false }
        return isAuthentic(tag: tag, topic: message.topic, payload: message.payload)
    }

    /// The byte after the tag that marks a chat the server API sent: the recipient's
    /// gateway drops a repeat of its id (another gateway behind a load balancer may have
    /// published it again). Not covered by the tag: flipping it can only make a gateway drop
    /// or keep a copy of a message the device already has.
    public static let sentByAPI: UInt8 = 0x01

    /// Whether `tag` (the correlation data) marks a chat the server API sent.
    public static func isSentByAPI(_ tag: [UInt8]?) -> Bool {
        guard let tag, tag.count == tagLength + 1 else { return false }
        return tag[tagLength] == sentByAPI
    }

    /// Whether `tag` is the tag of `topic` and `payload` (compared in constant time), alone
    /// or followed by ``sentByAPI``.
    public func isAuthentic(tag: [UInt8], topic: String, payload: [UInt8]) -> Bool {
        guard tag.count == Self.tagLength || Self.isSentByAPI(tag) else { return false }
        return withMAC(topic: topic, payload: payload) { expected in
            var difference: UInt8 = 0
            for index in 0..<Self.tagLength { difference |= expected[index] ^ tag[index] }
            return difference == 0
        }
    }

    /// Calls `body` with HMAC(key, topic ‖ 0x00 ‖ payload), 32 bytes on the stack. The zero
    /// byte (never in a topic) keeps a topic and a payload from sliding into each other; the
    /// topic's C string with its terminator is exactly that prefix.
    private func withMAC<Result>(topic: String, payload: [UInt8], _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 32) { out in
            withUnsafePointer(to: key) { key in
                topic.withCString { topicBytes in
                    payload.withUnsafeBytes { payloadBytes in
                        cmt_hmac(key, topicBytes, topic.utf8.count + 1, payloadBytes.baseAddress, payloadBytes.count, out.baseAddress!)
                    }
                }
            }
            return body(UnsafeRawBufferPointer(out))
        }
    }
}
