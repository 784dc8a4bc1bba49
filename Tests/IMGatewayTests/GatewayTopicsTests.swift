import IMGateway
import IMWire
import Testing

@Suite("GatewayTopics")
struct GatewayTopicsTests {
    let topics = GatewayTopics()

    @Test("per-user topics")
    func userTopics() {
        #expect(self.topics.inbox(user: "bob") == "im/u/bob/inbox")
        #expect(self.topics.presence(user: "bob", device: "phone-2") == "im/u/bob/presence/phone-2")
        #expect(self.topics.presenceFilter(user: "bob") == "im/u/bob/presence/+")
        #expect(self.topics.location(user: "alice") == "im/u/alice/location")
        #expect(self.topics.receipts(user: "alice") == "im/u/alice/receipts")
        #expect(self.topics.stats(gatewayID: "gw-1") == "im/$gateway/gw-1/stats")
    }

    @Test("prefix and space are configurable")
    func customPrefix() throws {
        let topics = GatewayTopics(prefix: "chat", pubsubSpace: "rooms")
        #expect(topics.inbox(user: "bob") == "chat/u/bob/inbox")
        #expect(try topics.pubsubTopic("chat/rooms/1") == "chat/rooms/1")
        #expect(throws: TopicError.outsideSpace("im/t/1", space: "chat/rooms/")) { try topics.pubsubTopic("im/t/1") }
    }

    @Test("MQTT client ids: imgw/{user}/{device} for devices, imgw-{role}/{gateway}/{random} for the gateway's own")
    func clientIDs() throws {
        #expect(self.topics.mqttClientID(user: "alice", device: "phone-1") == "imgw/alice/phone-1")
        let own = GatewayTopics.gatewayClientID("ctl", gatewayID: "gw-1").split(separator: "/")
        #expect(own.count == 3 && own[0] == "imgw-ctl" && own[1] == "gw-1" && UInt32(own[2]) != nil)
    }

    @Test("classify recognises each kind of topic")
    func classify() {
        #expect(self.topics.classify("im/u/bob/inbox") == .inbox(user: "bob"))
        #expect(self.topics.classify("im/u/bob/presence/phone-2") == .presence(user: "bob", device: "phone-2"))
        #expect(self.topics.classify("im/u/alice/location") == .location(user: "alice"))
        #expect(self.topics.classify("im/u/alice/receipts") == .receipts(user: "alice"))
        #expect(self.topics.classify("im/t/room-1/chat") == .pubsub(clientTopic: "im/t/room-1/chat"))
        for other in [
            "im/$gateway/gw-1/stats", "other/u/bob/inbox", "im/u/bob/outbox", "im/u/bob/inbox/x", "im/u/bob",
            "im/u/bob/presence", "im/u/bob/presence/a/b", "im/u//inbox", "im/t/", "im/t", "im",
        ] {
            #expect(self.topics.classify(other) == nil, "\(other)")
        }
    }

    @Test("classify inverts the topic builders")
    func classifyRoundTrip() {
        for user in ["alice", "李雷", "a.b@c"] {
            #expect(self.topics.classify(self.topics.inbox(user: user)) == .inbox(user: user))
            #expect(self.topics.classify(self.topics.receipts(user: user)) == .receipts(user: user))
            #expect(self.topics.classify(self.topics.location(user: user)) == .location(user: user))
            #expect(self.topics.classify(self.topics.presence(user: user, device: "d1")) == .presence(user: user, device: "d1"))
        }
    }

    @Test("client topics inside the space pass unchanged", arguments: ["im/t/room-1/chat", "im/t/a", "im/t/a//b", "im/t/a/"])
    func pubsubTopicAccepted(_ topic: String) throws {
        #expect(try self.topics.pubsubTopic(topic) == topic)
        #expect(try self.topics.pubsubFilter(topic) == topic)
        #expect(self.topics.clientTopic(fromPubsub: topic) == topic)
    }

    @Test("topics outside the space are refused", arguments: ["im/u/bob/inbox", "/im/t/a", "im/t", "im/t/", "im/tt/a", "x/t/a", "t/a", "im/$gateway/x"])
    func outsideSpace(_ topic: String) {
        #expect(throws: TopicError.self) { try self.topics.pubsubTopic(topic) }
        #expect(throws: TopicError.self) { try self.topics.pubsubFilter(topic) }
        #expect(self.topics.clientTopic(fromPubsub: topic) == nil)
    }

    @Test("filters may use wildcards only inside the space and only as whole levels")
    func filters() throws {
        for good in ["im/t/#", "im/t/+", "im/t/room-1/#", "im/t/+/chat", "im/t/+/+/#"] {
            #expect(try self.topics.pubsubFilter(good) == good)
            #expect(throws: TopicError.wildcardInTopic(good)) { try self.topics.pubsubTopic(good) }
        }
        for misplaced in ["im/t/a#", "im/t/#/a", "im/t/a+", "im/t/+a/b", "im/t/##"] {
            #expect(throws: TopicError.misplacedWildcard(misplaced)) { try self.topics.pubsubFilter(misplaced) }
        }
        // Filters that would reach outside the space, e.g. other users' inboxes.
        for escaping in ["#", "+/#", "im/#", "im/+/bob/inbox", "+/t/a"] {
            #expect(throws: TopicError.outsideSpace(escaping, space: "im/t/")) { try self.topics.pubsubFilter(escaping) }
        }
    }

    @Test("$, NUL and control characters are refused anywhere", arguments: ["$", "\u{0}", "\n", "\u{7F}"])
    func forbiddenCharacters(_ character: String) {
        let topic = "im/t/a\(character)b"
        #expect(throws: TopicError.forbiddenCharacter(topic, character.unicodeScalars.first!)) { try self.topics.pubsubTopic(topic) }
        #expect(throws: TopicError.forbiddenCharacter(topic, character.unicodeScalars.first!)) { try self.topics.pubsubFilter(topic) }
    }

    @Test("empty and over-long topics are refused")
    func lengths() throws {
        #expect(throws: TopicError.empty) { try self.topics.pubsubTopic("") }
        let longest = "im/t/" + String(repeating: "x", count: 1024 - 5)
        #expect(try self.topics.pubsubTopic(longest) == longest)
        #expect(throws: TopicError.tooLong(longest + "x", length: 1025)) { try self.topics.pubsubTopic(longest + "x") }
        #expect(TopicError.empty.errorCode == .invalidTopic)
    }

    @Test("topic levels for prefix and space", arguments: [("im", true), ("chat-v2", true), ("", false), ("a/b", false), ("+", false), ("#", false), ("$sys", false), ("a\u{0}", false)])
    func levels(_ level: String, _ valid: Bool) {
        #expect((GatewayTopics.invalidLevelReason(level) == nil) == valid)
    }
}
