@testable import IMGateway
import IMWire
import Mosquitto
import Testing

/// Presence probes (`broker.presence_probe`) and their answers, on a testing channel: what a
/// connection publishes, and what it tells the device.
extension DeviceConnectionTests {
    static func signal(to user: String, _ payload: some Encodable) -> MosquittoMessage {
        MosquittoMessage(topic: "im/u/\(user)/signal", payload: PayloadCodec.encode(payload), qos: .atMostOnce, deliveryID: 0)
    }

    static func retainedPresence(_ user: String, _ presence: PresencePayload) -> MosquittoMessage {
        MosquittoMessage(
            topic: "im/u/\(user)/presence/\(presence.device)", payload: PayloadCodec.encode(presence), qos: .atLeastOnce,
            retain: true, deliveryID: 0)
    }

    /// The next PRESENCE notice the gateway wrote (ACKs skipped).
    static func nextPresence(_ harness: Harness) async throws -> PresenceNotice {
        while true {
            let (_, message) = try await harness.next()
            if case .presence(let notice) = message { return notice }
            guard case .ack = message else { throw Failure("expected PRESENCE, got \(message)") }
        }
    }

    @Test("login asks the user's other devices for their presence; another device's probe is answered with the login's own 'online' on the asker's signal topic")
    func probeAnswered() async throws {
        let harness = try await Harness.start()
        let (_, session) = try await harness.login()
        let probe = await session.next { call -> PresenceProbePayload? in
            guard case .publish(let publish) = call, publish.topic == "im/u/alice/signal" else { return nil }
            return try? PayloadCodec.decode(PresenceProbePayload.self, from: publish.payload)
        }
        #expect(probe == PresenceProbePayload(from: "alice", device: "phone"))

        session.deliver(Self.signal(to: "alice", PresenceProbePayload(from: "carol", device: "tab-1")))
        let answer = await session.next { call -> OutgoingPublish? in
            if case .publish(let publish) = call, publish.topic == "im/u/carol/signal" { publish } else { nil }
        }
        let payload = try answer.map { try PayloadCodec.decode(PresenceAnswerPayload.self, from: $0.payload) }
        #expect(payload == PresenceAnswerPayload(
            presence: PresencePayload(status: .online, device: "phone", ts: session.loginTime, gateway: "gw-test"), user: "alice", to: "tab-1"))
        #expect(answer?.qos == .atMostOnce && answer?.retain == false)
        try await harness.channel.close()
    }

    @Test("an answer to this device is a PRESENCE notice; the same presence retained is not told again, a change is; a new watch tells its snapshot again; an answer for another device is dropped")
    func answerTold() async throws {
        let harness = try await Harness.start()
        let (_, session) = try await harness.login()
        try await harness.send(.presenceWatch(PresenceWatch(users: ["bob"])))
        let probed = await session.next { call -> String? in
            guard case .publish(let publish) = call, publish.topic == "im/u/bob/signal",
                  (try? PayloadCodec.decode(PresenceProbePayload.self, from: publish.payload)) != nil else { return nil }
            return publish.topic
        }
        #expect(probed != nil, "the watch probes bob's devices")

        let online = PresencePayload(status: .online, device: "laptop", ts: 100, gateway: "gw-2")
        session.deliver(Self.signal(to: "alice", PresenceAnswerPayload(presence: online, user: "bob", to: "tablet")))
        session.deliver(Self.signal(to: "alice", PresenceAnswerPayload(presence: online, user: "bob", to: "phone")))
        #expect(try await Self.nextPresence(harness) == PresenceNotice(user: "bob", device: "laptop", status: .online))

        // The retained copy of what the answer said: not told again. The change after it is.
        session.deliver(Self.retainedPresence("bob", online))
        session.deliver(Self.retainedPresence("bob", PresencePayload(status: .offline, device: "laptop", ts: 200)))
        #expect(try await Self.nextPresence(harness) == PresenceNotice(user: "bob", device: "laptop", status: .offline, lastSeen: 200))

        // Watched again: the snapshot (the same offline), which the broker sends after the
        // SUBSCRIBE, is told again.
        try await harness.send(.presenceWatch(PresenceWatch(users: ["bob"])))
        _ = await session.next { if case .subscribe(let filters) = $0, filters == ["im/u/bob/presence/+"] { true } else { nil } }
        session.deliver(Self.retainedPresence("bob", PresencePayload(status: .offline, device: "laptop", ts: 200)))
        #expect(try await Self.nextPresence(harness) == PresenceNotice(user: "bob", device: "laptop", status: .offline, lastSeen: 200))
        try await harness.channel.close()
    }

    @Test("an answer from another of the user's devices counts it for carbons, as its retained presence would")
    func ownDeviceAnswer() async throws {
        let harness = try await Harness.start()
        let (_, session) = try await harness.login()
        session.deliver(Self.signal(to: "alice", PresenceAnswerPayload(
            presence: PresencePayload(status: .online, device: "laptop", ts: 100), user: "alice", to: "phone")))
        try await harness.send(.chat(ChatSend(to: "bob", messageID: "c-1", content: .text("hi"))))
        let chats = await session.next { if case .chats(let chats) = $0 { chats } else { nil } }
        #expect(chats?.map(\.topic) == ["im/u/bob/inbox", "im/u/alice/inbox"], "the chat, and a carbon for the laptop")
        try await harness.channel.close()
    }

    @Test("presence_probe false: neither the login nor a watch publishes a probe")
    func probeOff() async throws {
        let harness = try await Harness.start { $0.broker.presenceProbe = false }
        let (_, session) = try await harness.login()
        try await harness.send(.presenceWatch(PresenceWatch(users: ["bob"])))
        try await harness.send(.readReceipt(ReadReceipt(to: "bob", messageID: "m-1")))
        // Everything published up to the read receipt: the announcement, nothing else.
        var published: [String] = []
        _ = await session.next { call -> Bool? in
            guard case .publish(let publish) = call else { return nil }
            published.append(publish.topic)
            return publish.topic == "im/u/bob/receipts" ? true : nil
        }
        #expect(published == ["im/u/alice/presence/phone", "im/u/bob/receipts"])
        try await harness.channel.close()
    }
}
