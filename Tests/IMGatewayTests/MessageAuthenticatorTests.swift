import Crypto
import Mosquitto
import Testing

@testable import IMGateway

@Suite("Message authentication between gateways")
struct MessageAuthenticatorTests {
    let authenticator = MessageAuthenticator(secret: "imgw-test-secret")
    let topic = "im/u/bob/inbox"
    let payload = Array(#"{"from":"alice","id":"m-1","text":"hi","to":"bob","ts":1735689600000,"type":"text"}"#.utf8)

    @Test("the tag is HMAC-SHA256 (key HKDF-SHA256 of the secret) of topic, 0, payload, cut to 16 bytes: the vector of SECURITY.md")
    func vector() {
        // Computed with Python's hmac and hashlib (SECURITY.md, "Messages only gateways write").
        #expect(hex(authenticator.tag(topic: topic, payload: payload)) == "ac181fda76504e532ca87bef5ccb7a75")
    }

    @Test("the precomputed construction gives Crypto.HMAC's tags, for payloads around the block sizes")
    func sameAsCryptoHMAC() {
        let key = SymmetricKey(size: .bits256)
        let ours = MessageAuthenticator(key: key)
        for length in [0, 1, 47, 48, 55, 56, 63, 64, 65, 119, 120, 200, 1000, 70_000] {
            let payload = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            var reference = HMAC<SHA256>(key: key)
            reference.update(data: Array(topic.utf8) + [0] + payload)
            let expected = reference.finalize().withUnsafeBytes { Array($0.prefix(MessageAuthenticator.tagLength)) }
            #expect(ours.tag(topic: topic, payload: payload) == expected, "payload of \(length) bytes")
        }
    }

    @Test("a tag checks out for its own topic and payload only, under its own secret only")
    func refusals() {
        let tag = authenticator.tag(topic: topic, payload: payload)
        #expect(authenticator.isAuthentic(tag: tag, topic: topic, payload: payload))
        #expect(!authenticator.isAuthentic(tag: tag, topic: "im/u/carol/inbox", payload: payload))
        var changed = payload
        changed[changed.count - 3] ^= 1
        #expect(!authenticator.isAuthentic(tag: tag, topic: topic, payload: changed))
        #expect(!MessageAuthenticator(secret: "another-secret").isAuthentic(tag: tag, topic: topic, payload: payload))
        var flipped = tag
        flipped[15] ^= 0x80
        #expect(!authenticator.isAuthentic(tag: flipped, topic: topic, payload: payload))
        #expect(!authenticator.isAuthentic(tag: Array(tag.prefix(15)), topic: topic, payload: payload))
        #expect(!authenticator.isAuthentic(tag: tag + [0], topic: topic, payload: payload))
        #expect(!authenticator.isAuthentic(tag: [], topic: topic, payload: payload))
        // The zero byte between them: the same bytes split elsewhere between topic and payload.
        #expect(!authenticator.isAuthentic(tag: tag, topic: "im/u/bob/inbo", payload: Array("x".utf8) + payload))
    }

    @Test("a message without correlation data, or with someone else's, is not authentic")
    func messages() {
        func message(_ correlation: [UInt8]?) -> MosquittoMessage {
            MosquittoMessage(
                topic: topic, payload: payload, qos: .atLeastOnce, retain: false, dup: false,
                properties: MQTTProperties(correlationData: correlation))
        }
        #expect(authenticator.isAuthentic(message(authenticator.tag(topic: topic, payload: payload))))
        #expect(!authenticator.isAuthentic(message(nil)))
        #expect(!authenticator.isAuthentic(message(Array(repeating: 0, count: 16))))
    }

    private func hex(_ bytes: [UInt8]) -> String {
        bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    @Test("a tag with the server API's flag byte checks out too, and says so; the flag alone is not a tag")
    func sentByAPIFlag() {
        let tag = authenticator.tag(topic: topic, payload: payload)
        let flagged = tag + [MessageAuthenticator.sentByAPI]
        #expect(authenticator.isAuthentic(tag: flagged, topic: topic, payload: payload))
        #expect(MessageAuthenticator.isSentByAPI(flagged))
        #expect(!MessageAuthenticator.isSentByAPI(tag) && !MessageAuthenticator.isSentByAPI(nil))
        #expect(!MessageAuthenticator.isSentByAPI(tag + [0x02]))
        #expect(!authenticator.isAuthentic(tag: tag + [0x01, 0x01], topic: topic, payload: payload), "17 bytes at most")
    }
}
