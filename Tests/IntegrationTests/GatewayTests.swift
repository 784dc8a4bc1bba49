import Foundation
import IMGateway
import IMWire
import Logging
import Mosquitto
import NIOCore
import Testing
import IMTestSupport

/// imgw's server in-process, against a real broker, with TLV test devices. What involves the
/// broker runs on mosquitto and on ejabberd (``BrokerKind``); a test that can run on one only
/// says why in its name. Tests of the gateway's own TLV handling (malformed frames, login and
/// idle time-outs, TLS, metrics, an overlong filter refused before the broker) run on mosquitto:
/// the broker plays no part in them.
@Suite("Gateway: chat and presence through a real broker", .stopsWhatItStarts, .startsEjabberdNodes)
struct GatewayTests {
    @Test("alice and bob chat; the message is readable on MQTT", arguments: BrokerKind.allCases)
    func chat(on broker: BrokerKind) async throws {
        let gateway = try await TestGateway.start(on: broker)
        let watcher = try await MQTTWatcher.start(gateway.broker, topic: "im/u/bob/#")
        defer { watcher.stop() }
        let alice = try await gateway.device("alice", device: "phone")
        let bob = try await gateway.device("bob", device: "phone")

        let ack = try await alice.chat(to: "bob", id: "m-1", text: "hi bob")
        #expect(ack.error == nil)
        #expect(ack.messageID == "m-1")
        #expect(ack.serverTime != nil)

        let (frame, message) = try await bob.next(within: 10, "bob's delivery")
        guard case .delivery(let delivery) = message else {
            Issue.record("expected a delivery, got \(message)")
            return
        }
        #expect(delivery.from == "alice")
        #expect(delivery.messageID == "m-1")
        #expect(delivery.content.text == "hi bob")
        try await bob.ack(frame)

        // What an operator sees with mosquitto_sub -v -t 'im/u/bob/#' (bob's presence too).
        var line = ""
        while !line.hasPrefix("im/u/bob/inbox ") {
            line = try await watcher.lines.next(within: 10, "the mosquitto_sub line of the message")
        }
        #expect(line.hasPrefix("im/u/bob/inbox {"))
        #expect(line.contains(#""from":"alice""#))
        #expect(line.contains(#""text":"hi bob""#))

        // And back.
        _ = try await bob.chat(to: "alice", id: "r-1", text: "hi alice")
        // Alice first hears that bob's device got m-1 (a "delivered" receipt).
        var reply: IMMessage
        repeat {
            (_, reply) = try await alice.next(within: 10, "alice's delivery")
            if case .receiptNotice(let notice) = reply {
                #expect(notice.kind == .delivered)
                #expect(notice.messageID == "m-1")
            }
        } while !{ if case .delivery = reply { true } else { false } }()
        guard case .delivery(let back) = reply else { return }
        #expect(back.from == "bob")
        #expect(back.content.text == "hi alice")
        await gateway.stop()
    }

    @Test("messages sent while bob is offline arrive in order when he logs in", arguments: BrokerKind.allCases)
    func offline(on broker: BrokerKind) async throws {
        let gateway = try await TestGateway.start(on: broker)
        let bob = try await gateway.device("bob", device: "tablet")
        try await bob.send(.logout(Logout()))
        _ = try await bob.next(within: 10, "the LOGOUT ack")
        let alice = try await gateway.device("alice", device: "phone")
        for index in 0..<20 {
            let ack = try await alice.chat(to: "bob", id: "o-\(index)", text: "offline \(index)")
            #expect(ack.error == nil)
        }
        let again = try await gateway.device("bob", device: "tablet")
        for index in 0..<20 {
            let (frame, message) = try await again.next(within: 10, "queued message \(index)")
            guard case .delivery(let delivery) = message else {
                Issue.record("expected delivery \(index), got \(message)")
                return
            }
            #expect(delivery.messageID == "o-\(index)")
            try await again.ack(frame)
        }
        await gateway.stop()
    }

    @Test("a resent message id is delivered once; a frame cannot choose its sender", arguments: BrokerKind.allCases)
    func resendAndSpoofing(on broker: BrokerKind) async throws {
        let gateway = try await TestGateway.start(on: broker)
        let alice = try await gateway.device("alice", device: "phone")
        let bob = try await gateway.device("bob", device: "phone")
        let first = try await alice.chat(to: "bob", id: "dup-1", text: "once")
        let second = try await alice.chat(to: "bob", id: "dup-1", text: "once", resend: true)
        #expect(first.error == nil)
        #expect(second.error == nil)
        #expect(second.serverTime == first.serverTime, "the resend is ACKed as the original")

        // A DATA frame that also carries FROM (0x0201) claiming to be mallory.
        var writer = TLVWriter()
        writer.write(.to, string: "bob")
        writer.write(.from, string: "mallory")
        writer.write(.messageID, string: "spoof-1")
        writer.write(.text, string: "trust me")
        let spoof = IMFrame(type: .data, sequence: 900, timestamp: 1_700_000_000, sessionID: 0, body: writer.buffer)
        try await alice.write(spoof)

        var received: [ChatDelivery] = []
        while received.count < 2 {
            let (frame, message) = try await bob.next(within: 10, "bob's deliveries")
            if case .delivery(let delivery) = message {
                received.append(delivery)
                try await bob.ack(frame)
            }
        }
        #expect(received.map(\.messageID) == ["dup-1", "spoof-1"], "dup-1 exactly once, then the spoof")
        #expect(received.allSatisfy { $0.from == "alice" }, "the sender is the session's user")
        await gateway.stop()
    }

    @Test("devices logging in while chats to their user stream in: each gets LOGIN_OK (a delivery arriving once a new session had subscribed held its announcement's PUBACK until the login's deadline)")
    func loginDuringTraffic() async throws {
        let gateway = try await TestGateway.start()
        let alice = try await gateway.device("alice", device: "phone")
        let stream = Task { try await alice.chatMany(to: "eve", ids: (0..<4_000).map { "s-\($0)" }, text: "x", window: 64) }
        for index in 0..<10 {
            let started = ContinuousClock.now
            let tablet = try await TestDevice.connect(port: gateway.port)
            try await tablet.login(token: try await gateway.minter.mint(user: "eve"), device: "tablet-\(index)")
            #expect(ContinuousClock.now - started < .seconds(5), "login \(index) took \(ContinuousClock.now - started)")
            await tablet.drop()
        }
        _ = try await stream.value
        await gateway.stop()
    }

    @Test("presence: online after login, offline at once after an abrupt drop, offline after logout", arguments: BrokerKind.allCases)
    func presence(on broker: BrokerKind) async throws {
        let gateway = try await TestGateway.start(on: broker)
        let watcher = makeClient(gateway.broker)
        let presence = try await connected(watcher)
        try await watcher.subscribe("im/u/carol/presence/+", qos: .atLeastOnce)

        let carol = try await gateway.device("carol", device: "laptop")
        let online = try await presence.next(within: 10, "online")
        #expect(online.topic == "im/u/carol/presence/laptop")
        #expect(online.payloadString.contains(#""status":"online""#))
        #expect(online.properties.contentType == "application/json")
        #expect(online.properties[user: "sender"] == "carol")

        await carol.drop()
        let offline = try await presence.next(within: 10, "offline by will")
        #expect(offline.payloadString.contains(#""status":"offline""#))

        let again = try await gateway.device("carol", device: "laptop")
        #expect(try await presence.next(within: 10, "online again").payloadString.contains("online"))
        try await again.send(.logout(Logout()))
        #expect(try await presence.next(within: 10, "offline by logout").payloadString.contains("offline"))
        await watcher.close()
        await gateway.stop()
    }

    @Test("a device watching a user gets PRESENCE notices: retained state first, then changes", arguments: BrokerKind.allCases)
    func presenceWatch(on broker: BrokerKind) async throws {
        let gateway = try await TestGateway.start(on: broker)
        let dave = try await gateway.device("dave", device: "phone")
        let carol = try await gateway.device("carol", device: "phone")
        try await carol.send(.presenceWatch(PresenceWatch(users: ["dave"])))
        var notices: [PresenceNotice] = []
        while notices.isEmpty {
            let (_, message) = try await carol.next(within: 10, "dave's retained presence")
            if case .presence(let notice) = message { notices.append(notice) }
        }
        #expect(notices[0].user == "dave")
        #expect(notices[0].device == "phone")
        #expect(notices[0].status == .online)
        await dave.drop()
        while true {
            let (_, message) = try await carol.next(within: 10, "dave going offline")
            if case .presence(let notice) = message {
                #expect(notice.user == "dave")
                #expect(notice.status == .offline)
                break
            }
        }
        await gateway.stop()
    }

    @Test("delivered and read receipts reach the sender's devices", arguments: BrokerKind.allCases)
    func readReceipt(on broker: BrokerKind) async throws {
        let gateway = try await TestGateway.start(on: broker)
        let alice = try await gateway.device("alice", device: "phone")
        let bob = try await gateway.device("bob", device: "phone")
        _ = try await alice.chat(to: "bob", id: "rr-1", text: "read me")
        let (frame, _) = try await bob.next(within: 10, "the delivery")
        try await bob.ack(frame)
        try await bob.send(.readReceipt(ReadReceipt(to: "alice", messageID: "rr-1")))
        var kinds: [IMReceiptKind] = []
        while !kinds.contains(.read) {
            let (frame, message) = try await alice.next(within: 10, "the receipt notices")
            if case .receiptNotice(let notice) = message {
                #expect(notice.from == "bob")
                #expect(notice.messageID == "rr-1")
                kinds.append(notice.kind)
                try await alice.ack(frame)
            }
        }
        #expect(kinds == [.delivered, .read], "delivered when bob's device ACKed, then read")
        await gateway.stop()
    }

    @Test("a device that never ACKs a delivery is dropped after the timeout and gets it again next time", arguments: BrokerKind.allCases)
    func deliveryAckTimeout(on broker: BrokerKind) async throws {
        let gateway = try await TestGateway.start(on: broker) { $0.limits.deliveryAckTimeout = 2 }
        let alice = try await gateway.device("alice", device: "phone")
        let bob = try await gateway.device("bob", device: "phone")
        _ = try await alice.chat(to: "bob", id: "lazy-1", text: "ack me")
        let (_, first) = try await bob.next(within: 10, "the delivery")
        guard case .delivery(let delivery) = first else {
            Issue.record("expected a delivery, got \(first)")
            return
        }
        #expect(delivery.resend == false)
        // No ACK: the gateway gives up on this connection, with a KICK that says why.
        var kicks: [Kick] = []
        var closed = false
        while !closed {
            do {
                let frame = try await bob.frames.next(within: 10, "the kick and the close")
                if case .kick(let kick) = try IMMessage(frame: frame) { kicks.append(kick) }
            } catch {
                closed = true
            }
        }
        #expect(kicks == [Kick(reason: .idleTimeout, message: "delivery not acknowledged within 2 s")])
        let again = try await gateway.device("bob", device: "phone")
        let (frame, second) = try await again.next(within: 10, "the redelivery")
        guard case .delivery(let redelivered) = second else {
            Issue.record("expected a delivery, got \(second)")
            return
        }
        #expect(redelivered.messageID == "lazy-1")
        // From the archive (its catch-up comes first) or the broker: flagged either way.
        #expect(redelivered.archived || redelivered.resend, "a redelivery is flagged as such")
        try await again.ack(frame)
        await gateway.stop()
    }

    @Test("gateway statistics are published retained on im/$gateway/{id}/stats", arguments: BrokerKind.allCases)
    func stats(on broker: BrokerKind) async throws {
        let gateway = try await TestGateway.start(on: broker) {
            $0.statsInterval = 1
            $0.gatewayID = "gw-test"
        }
        _ = try await gateway.device("alice", device: "phone")
        let watcher = makeClient(gateway.broker)
        let inbox = try await connected(watcher)
        try await watcher.subscribe("im/$gateway/+/stats", qos: .atLeastOnce)
        var payload = ""
        while !payload.contains(#""logged_in":1"#) {
            let message = try await inbox.next(within: 10, "a stats message")
            #expect(message.topic == "im/$gateway/gw-test/stats")
            payload = message.payloadString
        }
        #expect(payload.contains(#""gateway":"gw-test""#))
        await watcher.close()
        await gateway.stop()
    }

    @Test("location: a watcher in the audience gets positions, one outside is refused, stopping the share stops them", arguments: BrokerKind.allCases)
    func location(on broker: BrokerKind) async throws {
        let gateway = try await TestGateway.start(on: broker) { $0.location.maxUpdatesPerSecond = 100 }
        let alice = try await gateway.device("alice", device: "phone")
        let bob = try await gateway.device("bob", device: "phone")
        let carol = try await gateway.device("carol", device: "phone")

        try await alice.send(.locationShareStart(LocationShareStart(audience: ["bob"], duration: 600)))
        #expect(try await nextAck(alice)?.error == nil)
        try await bob.send(.locationWatch(LocationWatch(users: ["alice"])))
        #expect(try await nextAck(bob)?.error == nil)
        try await carol.send(.locationWatch(LocationWatch(users: ["alice"])))
        #expect(try await nextAck(carol)?.error == .forbidden, "carol is not in the audience")

        let here = IMLocation(lat: 52.52, lon: 13.405, tst: 1_700_000_000, acc: 12)
        try await alice.send(.locationUpdate(LocationUpdate(location: here)))
        #expect(try await nextAck(alice)?.error == nil)
        var notice: LocationNotice?
        while notice == nil {
            let (_, message) = try await bob.next(within: 10, "alice's position")
            if case .location(let seen) = message { notice = seen }
        }
        #expect(notice?.user == "alice")
        #expect(notice?.location.lat == 52.52)
        #expect(notice?.location.acc == 12)

        // Stop: further updates are refused, and a new share for someone else does not
        // reach bob, who is still subscribed.
        try await alice.send(.locationShareStop(LocationShareStop()))
        #expect(try await nextAck(alice)?.error == nil)
        try await alice.send(.locationUpdate(LocationUpdate(location: here)))
        #expect(try await nextAck(alice)?.error == .forbidden)
        try await alice.send(.locationShareStart(LocationShareStart(audience: ["carol"], duration: 600)))
        #expect(try await nextAck(alice)?.error == nil)
        try await alice.send(.locationUpdate(LocationUpdate(location: IMLocation(lat: 1, lon: 2, tst: 1_700_000_100))))
        #expect(try await nextAck(alice)?.error == nil)
        // Positions and chat from alice reach bob's gateway in publish order: if the chat
        // arrives with no position before it, the position was withheld.
        _ = try await alice.chat(to: "bob", id: "loc-marker", text: "marker")
        while true {
            let (frame, message) = try await bob.next(within: 10, "the marker")
            if case .location = message { Issue.record("bob got a position after the share stopped") }
            if case .delivery(let delivery) = message {
                #expect(delivery.messageID == "loc-marker")
                try await bob.ack(frame)
                break
            }
        }
        await gateway.stop()
    }

    @Test("location updates are throttled per the configured rate", arguments: BrokerKind.allCases)
    func locationThrottle(on broker: BrokerKind) async throws {
        let gateway = try await TestGateway.start(on: broker) { $0.location.maxUpdatesPerSecond = 0.2 }
        let alice = try await gateway.device("alice", device: "phone")
        try await alice.send(.locationShareStart(LocationShareStart(audience: ["bob"], duration: 60)))
        _ = try await nextAck(alice)
        let here = IMLocation(lat: 1, lon: 1, tst: 1_700_000_000)
        // Back to back (not each after the other's ACK, which a loaded machine may take a
        // second to give): the first goes out, the second is over the rate.
        try await alice.send(.locationUpdate(LocationUpdate(location: here)))
        try await alice.send(.locationUpdate(LocationUpdate(location: here)))
        // (The refusal is written at once; the accepted one's ACK waits for the broker.)
        let acks = [try await nextAck(alice), try await nextAck(alice)].compactMap { $0 }
        let ordered = acks.sorted { $0.sequence < $1.sequence }
        #expect(ordered.count == 2 && ordered[0].error == nil && ordered[1].error == .rateLimited, "\(acks)")
        await gateway.stop()
    }

    /// The next ACK a device receives (other frames skipped).
    private func nextAck(_ device: TestDevice) async throws -> Ack? {
        while true {
            let (_, message) = try await device.next(within: 10, "an ACK")
            if case .ack(let ack) = message { return ack }
        }
    }

    @Test("a SUBSCRIBE with a filter over 1024 bytes: the whole frame refused with BAD_REQUEST, its valid filter not subscribed either")
    func overlongFilter() async throws {
        let gateway = try await TestGateway.start()
        let alice = try await gateway.device("alice", device: "phone")
        let bob = try await gateway.device("bob", device: "phone")
        let long = "im/t/" + String(repeating: "a", count: 1020)
        try await bob.send(.subscribe(Subscribe(subscriptions: [.init(filter: "im/t/ok/#", qos: .atLeastOnce), .init(filter: long, qos: .atLeastOnce)])))
        #expect(try await nextAck(bob)?.error == .badRequest)
        // Still open; a later subscription works, and what was published to the valid filter
        // before it never arrives.
        try await alice.send(.publish(Publish(topic: "im/t/ok/x", payload: ByteBuffer(string: "not for bob"), qos: .atLeastOnce)))
        #expect(try await nextAck(alice)?.error == nil)
        try await bob.send(.subscribe(Subscribe(subscriptions: [.init(filter: "im/t/marker", qos: .atLeastOnce)])))
        #expect(try await nextAck(bob)?.error == nil)
        try await alice.send(.publish(Publish(topic: "im/t/marker", payload: ByteBuffer(string: "marker"), qos: .atLeastOnce)))
        #expect(try await nextAck(alice)?.error == nil)
        while true {
            let (frame, message) = try await bob.next(within: 10, "the marker")
            if case .publish(let publish) = message {
                #expect(publish.topic == "im/t/marker", "im/t/ok/# was never subscribed")
                try await bob.ack(frame)
                break
            }
        }
        await gateway.stop()
    }

    @Test("10,000 subscribe attempts from one device: 100 granted (limits.max_subscriptions), the rest LIMIT_REACHED, the broker's memory flat; an unsubscribe makes room (mosquitto only: an Erlang VM's memory is not flat enough to tell)")
    func subscriptionLimit() async throws {
        let gateway = try await TestGateway.start()
        let bob = try await gateway.device("bob", device: "phone")
        let brokerPID = gateway.broker.pid
        func brokerKiB() -> Int {
            let status = (try? String(contentsOfFile: "/proc/\(brokerPID)/status", encoding: .utf8)) ?? ""
            let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
            return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
        }
        // Warm up: the first subscriptions allocate the broker's tables.
        try await bob.send(.subscribe(Subscribe(subscriptions: (0..<100).map { .init(filter: "im/t/room-\($0)/#", qos: .atLeastOnce) })))
        let first = try #require(try await nextAck(bob))
        #expect(first.subscriptions.allSatisfy { $0.outcome == .granted(.atLeastOnce) })
        let before = brokerKiB()
        var granted = 0
        var limited = 0
        for frame in 1..<100 {
            try await bob.send(.subscribe(Subscribe(subscriptions: (0..<100).map {
                .init(filter: "im/t/room-\(frame)-\($0)/#", qos: .atLeastOnce)
            })))
            let ack = try #require(try await nextAck(bob))
            for result in ack.subscriptions {
                if case .granted = result.outcome { granted += 1 }
                if result.outcome == .refused(.limitReached) { limited += 1 }
            }
        }
        #expect(granted == 0 && limited == 9_900)
        let after = brokerKiB()
        #expect(before > 0 && after - before < 1024, "the broker grew \(after - before) KiB")
        // One unsubscribe makes room for one more.
        try await bob.send(.unsubscribe(Unsubscribe(filters: ["im/t/room-0/#"])))
        _ = try await nextAck(bob)
        try await bob.send(.subscribe(Subscribe(subscriptions: [.init(filter: "im/t/new/#", qos: .atLeastOnce), .init(filter: "im/t/newer/#", qos: .atLeastOnce)])))
        let last = try #require(try await nextAck(bob))
        #expect(last.subscriptions.map(\.outcome) == [.granted(.atLeastOnce), .refused(.limitReached)])
        await gateway.stop()
    }

    @Test("a broker anyone may write to (anonymous, no ACL): a forged chat, receipt and share are not taken for a gateway's (mosquitto only: ejabberd takes no anonymous clients)")
    func forgeriesOnAPermissiveBroker() async throws {
        let gateway = try await TestGateway.start()
        let alice = try await gateway.device("alice", device: "phone")
        let bob = try await gateway.device("bob", device: "phone")
        let mallory = try await gateway.device("mallory", device: "phone")
        let forger = makeClient(gateway.broker)
        try await forger.connect()
        try await forger.publish(
            topic: "im/u/bob/inbox", string: #"{"from":"alice","id":"forged-1","text":"pay mallory","to":"bob","ts":1700000000000,"type":"text"}"#,
            qos: .atLeastOnce, properties: .init(correlationData: Array(repeating: 0, count: 16)))
        try await forger.publish(
            topic: "im/u/alice/receipts", string: #"{"by":"bob","device":"phone","ids":["m-x"],"kind":"read","ts":1700000000000}"#, qos: .atLeastOnce)
        try await forger.publish(
            topic: "im/u/alice/location/share", string: #"{"audience":["mallory"],"until":4102444800000,"user":"alice"}"#,
            qos: .atLeastOnce, retain: true)
        await forger.close()
        // Had any been taken, it would come before these.
        #expect(try await alice.chat(to: "bob", id: "real-1", text: "hello").error == nil)
        #expect(try await bob.nextDelivery("alice's chat").messageID == "real-1", "the forged chat was not delivered")
        try await bob.send(.readReceipt(ReadReceipt(to: "alice", messageID: "real-1")))
        var notice: ReceiptNotice?
        while notice == nil {
            let (frame, message) = try await alice.next(within: 10, "bob's receipt")
            if case .receiptNotice(let seen) = message {
                try await alice.ack(frame)
                notice = seen
            }
        }
        #expect(notice?.messageID == "real-1", "the forged receipt was not passed on")
        try await mallory.send(.locationWatch(LocationWatch(users: ["alice"])))
        #expect(try await nextAck(mallory)?.error == .forbidden, "the forged share gave mallory nothing")
        // Counted: the chat and the receipt at least (each dropped before the real one came;
        // the share's follower may not have got to it yet).
        let port = try #require(await gateway.server.metrics?.localAddress().port)
        let metrics = try await run("/usr/bin/curl", ["-sS", "http://127.0.0.1:\(port)/metrics"])
        let dropped = metrics.split(separator: "\n").first { $0.hasPrefix("imgw_forged_messages_dropped_total ") }
            .flatMap { Double($0.split(separator: " ").last ?? "") }
        #expect((dropped ?? 0) >= 2, "imgw_forged_messages_dropped_total: \(String(describing: dropped))")
        await gateway.stop()
    }

    @Test("generic pub/sub inside the topic space; outside it is refused", arguments: BrokerKind.allCases)
    func pubsub(on broker: BrokerKind) async throws {
        let gateway = try await TestGateway.start(on: broker) { $0.pubsub.maxQoS = 1 }
        let alice = try await gateway.device("alice", device: "phone")
        let bob = try await gateway.device("bob", device: "phone")
        try await bob.send(.subscribe(Subscribe(subscriptions: [
            .init(filter: "im/t/room-1/#", qos: .exactlyOnce), .init(filter: "im/u/alice/inbox", qos: .atLeastOnce),
        ])))
        guard let subscribed = try await nextAck(bob) else { return }
        #expect(subscribed.subscriptions.map(\.filter) == ["im/t/room-1/#", "im/u/alice/inbox"])
        #expect(subscribed.subscriptions.first?.outcome == .granted(.atLeastOnce), "QoS capped at pubsub.max_qos")
        #expect(subscribed.subscriptions.last?.outcome == .refused(.invalidTopic), "no reading someone's inbox")

        try await alice.send(.publish(Publish(topic: "im/t/room-1/chat", payload: ByteBuffer(string: "hello room"), qos: .atLeastOnce)))
        #expect(try await nextAck(alice)?.error == nil)
        try await alice.send(.publish(Publish(topic: "im/u/bob/inbox", payload: ByteBuffer(string: "spoof"))))
        #expect(try await nextAck(alice)?.error == .invalidTopic)
        try await alice.send(.publish(Publish(topic: "im/t/room-1/chat", payload: ByteBuffer(string: "x"), qos: .exactlyOnce)))
        #expect(try await nextAck(alice)?.error == .qosNotSupported)

        while true {
            let (frame, message) = try await bob.next(within: 10, "the room message")
            if case .publish(let publish) = message {
                #expect(publish.topic == "im/t/room-1/chat")
                #expect(String(buffer: publish.payload) == "hello room")
                #expect(publish.qos == .atLeastOnce)
                try await bob.ack(frame)
                break
            }
        }
        await gateway.stop()
    }

    @Test("Prometheus metrics on /metrics: levels are gauges, every *_total a counter")
    func metrics() async throws {
        let gateway = try await TestGateway.start()
        let alice = try await gateway.device("alice", device: "phone")
        _ = try await gateway.device("bob", device: "phone")
        #expect(try await alice.chat(to: "bob", id: "metrics-1", text: "counted").error == nil)
        let port = try #require(await gateway.server.metrics?.localAddress().port)
        let text = try await run("/usr/bin/curl", ["-sS", "http://127.0.0.1:\(port)/metrics"])
        #expect(text.contains("# TYPE imgw_logged_in gauge"))
        #expect(text.contains("imgw_logged_in{transport=\"tcp\"} 2"))
        #expect(text.contains("imgw_logged_in{transport=\"websocket\"} 0"))
        #expect(text.contains("# TYPE imgw_chat_messages_in_total counter"))
        #expect(text.contains("imgw_chat_messages_in_total{transport=\"tcp\"} 1"))
        let types = text.split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }.map { $0.split(separator: " ") }
        #expect(types.count > 10)
        for type in types where type.count == 4 {
            #expect((type[3] == "counter") == type[2].hasSuffix("_total"), "\(type.joined(separator: " "))")
        }
        let missing = try await run("/usr/bin/curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:\(port)/other"])
        #expect(missing == "404")
        await gateway.stop()
    }

    @Test("device connections over TLS (listen.tls); a plain client gets nothing")
    func tlsListener() async throws {
        let pki = try await TLSTests.PKI.make()
        defer { try? FileManager.default.removeItem(at: pki.directory) }
        let gateway = try await TestGateway.start {
            $0.listen.tls = .init(certFile: pki.path("server.crt"), keyFile: pki.path("server.key"))
        }
        let alice = try await TestDevice.connect(port: gateway.port, trusting: pki.path("ca.crt"))
        try await alice.login(token: try await gateway.minter.mint(user: "alice"), device: "phone")
        let bob = try await TestDevice.connect(port: gateway.port, trusting: pki.path("ca.crt"))
        try await bob.login(token: try await gateway.minter.mint(user: "bob"), device: "phone")
        #expect(try await alice.chat(to: "bob", id: "tls-1", text: "secret").error == nil)
        let (_, message) = try await bob.next(within: 10, "the delivery over TLS")
        guard case .delivery(let delivery) = message else {
            Issue.record("expected a delivery, got \(message)")
            return
        }
        #expect(delivery.content.text == "secret")

        let plain = try await TestDevice.connect(port: gateway.port)
        _ = try? await plain.send(.login(LoginRequest(token: try await gateway.minter.mint(user: "eve"))))
        await #expect(throws: TestError.self) { _ = try await plain.next(within: 5, "anything in clear") }
        await gateway.stop()
    }

    /// A valid 28-byte header with the given fields (CRC of `body`).
    static func header(magic: UInt32 = 0xDECA_FBAD, major: UInt8 = 1, type: UInt16 = 1, length: UInt32, crc: UInt32 = 0) -> [UInt8] {
        var buffer = ByteBuffer()
        buffer.writeInteger(magic)
        buffer.writeInteger(major)
        buffer.writeInteger(UInt8(0))
        buffer.writeInteger(type)
        buffer.writeInteger(UInt32(7))
        buffer.writeInteger(UInt32(1_700_000_000))
        buffer.writeInteger(UInt8(0))
        buffer.writeInteger(UInt8(0))
        buffer.writeInteger(UInt16(0))
        buffer.writeInteger(length)
        buffer.writeInteger(crc)
        return Array(buffer.readableBytesView)
    }

    @Test("malformed frames get an ERROR frame with their code, then the connection closes", arguments: [
        ("bad magic", header(magic: 0x1234_5678, length: 0), IMErrorCode.badMagic),
        ("unsupported version", header(major: 2, length: 0), .unsupportedVersion),
        ("unknown type", header(type: 99, length: 0), .unknownFrameType),
        ("announced body over the limit, refused before any body byte", header(type: 0, length: 50_000_000), .bodyTooLarge),
        ("bad CRC", header(type: 0, length: 6, crc: 1) + [0x10, 0x01, 0, 0, 0, 0], .badChecksum),
        ("malformed TLV", header(type: 0, length: 6, crc: 0xF6A8_322C) + [0x10, 0x01, 0, 0, 0, 9], .malformedFrame),
    ])
    func malformed(_ what: String, bytes: [UInt8], code: IMErrorCode) async throws {
        let gateway = try await TestGateway.start()
        let socket = try RawSocket(port: gateway.port)
        socket.send(bytes)
        let (frames, closed) = try await socket.readFramesUntilClose()
        #expect(closed, "\(what): the gateway closes the connection")
        let notice = errorNotices(frames).first
        #expect(notice?.code == code, "\(what): got \(String(describing: notice))")
        await gateway.stop()
    }

    @Test("heartbeats are answered before login; a bad token is refused with an error, then close")
    func loginAndHeartbeat() async throws {
        let gateway = try await TestGateway.start()
        let device = try await TestDevice.connect(port: gateway.port)
        let beat = try await device.send(.heartbeat)
        let (reply, _) = try await device.next(within: 10, "the heartbeat ACK")
        #expect(reply.header.type == .ack)
        #expect(reply.header.sequence == beat)

        try await device.send(.chat(ChatSend(to: "bob", messageID: "early", content: .text("x"))))
        let (_, early) = try await device.next(within: 10, "refusal before login")
        guard case .ack(let refusal) = early else {
            Issue.record("expected a negative ACK, got \(early)")
            return
        }
        #expect(refusal.error == .notLoggedIn)

        try await device.send(.login(LoginRequest(token: "not-a-jwt")))
        let (_, refused) = try await device.next(within: 10, "the login refusal")
        guard case .error(let notice) = refused else {
            Issue.record("expected an ERROR, got \(refused)")
            return
        }
        #expect(notice.code == .authFailed || notice.code == .tokenExpired)
        await #expect(throws: TestError.self) { _ = try await device.frames.next(within: 10, "the close") }

        let expired = try await gateway.minter.mint(user: "dave", validFor: -3600)
        let late = try await TestDevice.connect(port: gateway.port)
        try await late.send(.login(LoginRequest(token: expired)))
        let (_, answer) = try await late.next(within: 10, "the expired-token refusal")
        guard case .error(let expiredNotice) = answer else {
            Issue.record("expected an ERROR, got \(answer)")
            return
        }
        #expect(expiredNotice.code == .tokenExpired)
        await gateway.stop()
    }

    @Test("a connection that does not log in in time gets LOGIN_TIMEOUT and is closed")
    func loginTimeout() async throws {
        let gateway = try await TestGateway.start { $0.limits.loginTimeout = 1 }
        let device = try await TestDevice.connect(port: gateway.port)
        let (_, message) = try await device.next(within: 10, "the timeout notice")
        guard case .error(let notice) = message else {
            Issue.record("expected an ERROR, got \(message)")
            return
        }
        #expect(notice.code == .loginTimeout)
        await #expect(throws: TestError.self) { _ = try await device.frames.next(within: 10, "the close") }
        await gateway.stop()
    }

    @Test("a logged-in device that sends nothing is kicked with IDLE_TIMEOUT, whose text names the silence")
    func idleTimeout() async throws {
        let gateway = try await TestGateway.start { $0.limits.idleTimeout = 3 }
        let device = try await gateway.device("gina", device: "phone")
        let (_, message) = try await device.next(within: 10, "the kick")
        #expect(message == .kick(Kick(reason: .idleTimeout, message: "nothing received for 3 s")))
        await #expect(throws: TestError.self) { _ = try await device.frames.next(within: 10, "the close") }
        await gateway.stop()
    }

    @Test("same user and device logging in again: the old connection is kicked", arguments: BrokerKind.allCases)
    func takeover(on broker: BrokerKind) async throws {
        let gateway = try await TestGateway.start(on: broker)
        let first = try await gateway.device("erin", device: "phone")
        let second = try await gateway.device("erin", device: "phone")
        let (_, message) = try await first.next(within: 10, "the kick")
        guard case .kick(let kick) = message else {
            Issue.record("expected KICK, got \(message)")
            return
        }
        #expect(kick.reason == .sessionTakenOver)
        // The new connection works.
        let other = try await gateway.device("frank", device: "phone")
        _ = try await other.chat(to: "erin", id: "t-1", text: "still there?")
        let (_, delivery) = try await second.next(within: 10, "delivery on the new connection")
        guard case .delivery(let chat) = delivery else {
            Issue.record("expected a delivery, got \(delivery)")
            return
        }
        #expect(chat.messageID == "t-1")
        await gateway.stop()
    }
}
