import Foundation
import IMGateway
import IMWire
import Testing
import IMTestSupport

/// imgw on ejabberd 23.01 (mod_mqtt), the second MQTT 5 broker: one node started by the test
/// (``TestEjabberd``), a real imgw process with the node's account.
@Suite("ejabberd: imgw on one ejabberd node", .stopsWhatItStarts, .serialized, .startsEjabberdNodes)
struct EjabberdTests {
    @Test("chat both ways, and messages sent while bob is offline arrive in order when he logs in: without the archive from ejabberd's queue, the first marked RESEND (an ejabberd defect); with it from the archive, once each", arguments: [false, true])
    func chatAndOfflineOrder(archive: Bool) async throws {
        let broker = try await TestEjabberd.start()
        let gateway = try await IMGWProcess.start(broker: broker, archive: archive ? .sqlite : .none)
        let (bob, first) = try await gateway.login("bob", device: "tablet")
        #expect(first.sessionResumed == false, "a new session")
        try await bob.send(.logout(Logout()))
        _ = try await bob.next(within: 10, "the LOGOUT ack")
        let alice = try await gateway.device("alice")
        for index in 0..<10 {
            #expect(try await alice.chat(to: "bob", id: "o-\(index)", text: "offline \(index)").error == nil)
        }
        let (again, resumed) = try await gateway.login("bob", device: "tablet")
        #expect(resumed.sessionResumed == true, "the broker kept the session")
        var resends: [Bool] = []
        for index in 0..<10 {
            let (frame, message) = try await again.next(within: 10, "queued message \(index)")
            guard case .delivery(let delivery) = message else { throw TestError("expected delivery \(index), got \(message)") }
            #expect(delivery.messageID == "o-\(index)")
            #expect(delivery.from == "alice")
            #expect(delivery.archived == archive)
            resends.append(delivery.resend)
            try await again.ack(frame)
        }
        if archive {
            // The archive's catch-up comes first; ejabberd's queue, held meanwhile, is all
            // duplicates, dropped.
            #expect(resends == Array(repeating: false, count: 10))
        } else {
            // ejabberd 23.01 sends the first message of a backlog with DUP set, although the
            // device never had it: imgw passes it on as RESEND (it cannot tell that DUP from a
            // real redelivery), and the device, which de-duplicates by message id, shows it once.
            #expect(resends == [true] + Array(repeating: false, count: 9), "RESEND on the backlog: \(resends)")
        }
        // And back, live.
        #expect(try await again.chat(to: "alice", id: "r-1", text: "back").error == nil)
        var reply: IMMessage
        repeat {
            (_, reply) = try await alice.next(within: 10, "alice's delivery")
        } while !{ if case .delivery = reply { true } else { false } }()
        guard case .delivery(let back) = reply else { return }
        #expect(back.messageID == "r-1")
        await gateway.stop()
    }

    @Test("ejabberd ends a session whose queue is full (max_queue) with Quota exceeded, dropping what it held: the device is told so, and imgw logs and counts it")
    func quotaExceeded() async throws {
        var options = TestEjabberd.Options()
        options.maxQueue = 5
        let broker = try await TestEjabberd.start(options)
        let gateway = try await IMGWProcess.start(broker: broker)
        // bob's device takes deliveries but never ACKs them: imgw holds their PUBACKs
        // (ack-through), ejabberd keeps one in flight and queues the rest.
        let bob = try await gateway.device("bob")
        let alice = try await gateway.device("alice")
        for index in 0..<12 {
            #expect(try await alice.chat(to: "bob", id: "q-\(index)", text: "message \(index)").error == nil)
        }
        let error = try await bob.nextError(within: 15)
        #expect(error.code == .brokerUnavailable)
        #expect(error.message?.contains("queue for this device was full") == true, "\(error.message ?? "")")
        try await bob.closed()
        #expect(try await gateway.metric("imgw_broker_quota_disconnects_total") == 1)
        #expect(gateway.output.text.withLock { $0 }.contains("its queue for this device was full"))
        await gateway.stop()
    }

    @Test("ejabberd drops an offline session whose queue overflows (max_queue), with everything it held: the device's next login finds a new session, and LOGIN_OK says so (SESSION_RESUMED 0); with the archive, the device gets all of it from there", arguments: [false, true])
    func offlineQuotaExceeded(archive: Bool) async throws {
        var options = TestEjabberd.Options()
        options.maxQueue = 5
        let broker = try await TestEjabberd.start(options)
        let gateway = try await IMGWProcess.start(broker: broker, archive: archive ? .sqlite : .none)
        let bob = try await gateway.device("bob")
        try await bob.send(.logout(Logout()))
        _ = try await bob.next(within: 10, "the LOGOUT ack")
        let alice = try await gateway.device("alice")
        for index in 0..<8 {
            #expect(try await alice.chat(to: "bob", id: "q-\(index)", text: "message \(index)").error == nil)
        }
        let (again, ok) = try await gateway.login("bob")
        #expect(ok.sessionResumed == false, "LOGIN_OK tells the device that its session is new: what was queued is gone")
        // A marker sent after the login: without the archive, the first delivery is it, nothing
        // queued came first; with it, the 8 come first, from the archive.
        #expect(try await alice.chat(to: "bob", id: "marker", text: "after the login").error == nil)
        var ids: [String] = []
        while ids.last != "marker" { ids.append(try await again.nextDelivery(within: 10, "bob's deliveries").messageID) }
        if archive {
            #expect(ids == (0..<8).map { "q-\($0)" } + ["marker"], "the archive gives back what ejabberd dropped")
        } else {
            #expect(ids == ["marker"], "ejabberd kept the overflowing offline queue after all")
        }
        await gateway.stop()
    }

    @Test("ejabberd refuses a filter with 8 or more / (max_topic_depth 8): the device gets INVALID_TOPIC with the broker's reason, not FORBIDDEN")
    func deepFilterIsInvalidTopic() async throws {
        let broker = try await TestEjabberd.start()
        let gateway = try await IMGWProcess.start(broker: broker)
        let alice = try await gateway.device("alice")
        let deep = "im/t/a/b/c/d/e/f/g"
        let sequence = try await alice.send(.subscribe(Subscribe(subscriptions: [
            .init(filter: deep, qos: .atLeastOnce), .init(filter: "im/t/a/b", qos: .atLeastOnce),
        ])))
        let ack = try await alice.nextAck(of: sequence)
        #expect(ack.subscriptions.count == 2)
        #expect(ack.subscriptions.first?.outcome == .refused(.invalidTopic))
        #expect(ack.subscriptions.first?.reason?.contains("Topic Filter invalid") == true, "\(ack.subscriptions)")
        #expect(ack.subscriptions.last?.outcome == .granted(.atLeastOnce))
        await gateway.stop()
    }
}
