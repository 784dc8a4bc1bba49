import FaultProxy
import Foundation
import IMClient
import IMGateway
import Testing
import IMTestSupport

/// IMClient's reliability against real imgw processes and a real mosquitto: gateway restarts
/// under a stream of messages, and a connection that silently stops forwarding.
@Suite("IMClient reliability: restarts and dead connections", .stopsWhatItStarts, .startsEjabberdNodes)
struct ClientReliabilityTests {
    @Test("imgw restarted twice (SIGTERM, then kill -9) under a stream of messages: every one arrives once, none surfaced twice", arguments: BrokerKind.allCases)
    func gatewayRestartedUnderStream(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let port = freePort()
        var gateway = try await IMGWProcess.start(broker: broker, port: port)
        let alice = try await Self.client("alice", port: port)
        let bob = try await Self.client("bob", port: port)
        let aliceEvents = Collector(alice.events)
        let received = ReceivedMessages(bob.events)

        // Four senders, 100 messages each, in flight together, spread over a few seconds so
        // that the restarts happen in the middle of the stream.
        let ids = (0..<4).map { sender in (0..<100).map { "s\(sender)-\($0)" } }
        let senders = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for slice in ids {
                    group.addTask {
                        for id in slice {
                            try await alice.send(to: "bob", text: id, messageID: id)
                            try await Task.sleep(for: .milliseconds(20))  // pacing, not synchronisation
                        }
                    }
                }
                try await group.waitForAll()
            }
        }

        // Restart under the stream: gracefully once, then abruptly.
        try await received.waitForCount(100)
        await gateway.stop()
        gateway = try await IMGWProcess.start(broker: broker, port: port)
        try await received.waitForCount(200)
        await gateway.kill9()
        gateway = try await IMGWProcess.start(broker: broker, port: port)

        try await senders.value  // every send returned: ACKed by a gateway
        do {
            try await received.waitForCount(400)
        } catch {
            let missing = Set(ids.joined()).subtracting(await received.ids)
            Issue.record("missing \(missing.sorted()); imgw: \(gateway.output.text.withLock { $0 }.suffix(3000))")
            throw error
        }
        // A last message after everything: a late duplicate would have come before it.
        try await alice.send(to: "bob", text: "end", messageID: "end")
        try await received.waitForCount(401)

        let surfaced = await received.ids
        #expect(surfaced.count == 401, "no duplicate surfaced")
        #expect(Set(surfaced) == Set(ids.joined() + ["end"]), "nothing lost")
        let reconnections = await aliceEvents.pending.filter { if case .reconnected = $0 { true } else { false } }
        #expect(reconnections.count >= 2, "alice reconnected after each restart")

        await alice.logout()
        await bob.logout()
        await gateway.stop()
        await broker.stop()
    }

    @Test("a connection blackholed by a proxy is found dead by the heartbeat within the bound, then replaced; chat goes on both ways", arguments: BrokerKind.allCases)
    func blackholedConnection(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let gateway = try await IMGWProcess.start(broker: broker)
        let proxy = try await FaultProxy.start(upstreamPort: gateway.port)
        TestResources.track { await proxy.stop() }
        var configuration = try await Self.configuration("alice", port: proxy.port)
        configuration.heartbeat = AdaptiveHeartbeat.Configuration(
            minInterval: .milliseconds(500), maxInterval: .seconds(1),
            minAckTimeout: .milliseconds(500), maxAckTimeout: .seconds(1))
        let alice = try await tracked(IMClient.connect(configuration))
        let bob = try await Self.client("bob", port: gateway.port)
        let aliceEvents = Collector(alice.events)
        let bobReceived = ReceivedMessages(bob.events)

        try await alice.send(to: "bob", text: "before", messageID: "before")
        try await bobReceived.waitForCount(1)

        // The proxy stops forwarding and keeps the connection open: no FIN, no RST.
        let bound = try #require(await alice.deadConnectionBound)
        let silent = ContinuousClock.now
        proxy.blackholeAll()
        let during = Task { try await alice.send(to: "bob", text: "during", messageID: "during") }
        var cause: IMClientError?
        while cause == nil {
            if case .reconnecting(let reconnecting) = try await aliceEvents.next(within: 30, "reconnecting") { cause = reconnecting.cause }
        }
        let detected = ContinuousClock.now - silent
        #expect(cause == .connectionDead)
        // The exact bound is AdaptiveHeartbeatTests' (a simulated clock). Here the heartbeat
        // must be what found the silence: the default policy would take 45 s and TCP would never
        // say anything, while a machine busy with the rest of the suite delays the timers, so
        // the slack is generous.
        #expect(detected <= bound + .seconds(15), "declared dead after \(detected); the bound is \(bound)")

        // New connections pass: alice is back, and what she sent meanwhile arrives once.
        while true {
            if case .reconnected = try await aliceEvents.next(within: 30, "reconnected") { break }
        }
        _ = try await during.value
        try await alice.send(to: "bob", text: "after", messageID: "after")
        try await bobReceived.waitForCount(3)
        #expect(await bobReceived.ids == ["before", "during", "after"])
        try await bob.send(to: "alice", text: "back", messageID: "back")
        while true {
            guard case .message(let message) = try await aliceEvents.next(within: 30, "bob's message") else { continue }
            #expect(message.messageID == "back")
            break
        }

        await alice.close()
        await bob.close()
        await proxy.stop()
        await gateway.stop()
        await broker.stop()
    }

    @Test("an offline backlog of 70 messages arrives batched: at most 30 per batch, all of them, in order, in a few batches", arguments: BrokerKind.allCases)
    func offlineBacklogBatched(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let gateway = try await IMGWProcess.start(broker: broker)
        // bob's device has a session, then goes away; alice writes 70 messages meanwhile.
        let bobFirst = try await Self.client("bob", port: gateway.port)
        await bobFirst.close()
        let alice = try await Self.client("alice", port: gateway.port)
        let aliceEvents = Collector(alice.events)
        let ids = (0..<70).map { "b-\($0)" }
        for id in ids { try await alice.send(to: "bob", text: id, messageID: id) }

        let bob = try await Self.client("bob", port: gateway.port)
        var batches: [[String]] = []
        for await batch in bob.events.batched(BatchPolicy(interval: .milliseconds(350), timeout: .seconds(5), maxCount: 30)) {
            batches.append(batch.compactMap { if case .message(let message) = $0 { message.messageID } else { nil } })
            if batches.joined().count >= ids.count { break }
        }
        #expect(Array(batches.joined()) == ids, "all of them, once, in order")
        #expect(batches.allSatisfy { $0.count <= 30 })
        #expect(batches.count <= 5, "a backlog comes in a few batches, not 70 updates: \(batches.map(\.count))")

        // bob's device ACKed them all: alice hears "delivered" for each one, once (the
        // gateway coalesces the receipts of a burst of ACKs into fewer MQTT messages).
        var delivered: [String] = []
        while delivered.count < ids.count {
            if case .receipt(let receipt) = try await aliceEvents.next(within: 30, "delivered receipts"), receipt.kind == .delivered {
                delivered.append(receipt.messageID)
            }
        }
        #expect(delivered.sorted() == ids.sorted())

        await alice.close()
        await bob.logout()
        await gateway.stop()
        await broker.stop()
    }

    // MARK: Helpers

    static func configuration(_ user: String, port: Int) async throws -> IMClient.Configuration {
        let token = try await TokenMinter(secret: IMGWProcess.secret).mint(user: user)
        return IMClient.Configuration(
            port: port, token: token, deviceID: "phone", backoff: ReconnectBackoff(base: .milliseconds(250), cap: .seconds(2)))
    }

    static func client(_ user: String, port: Int) async throws -> IMClient {
        try await tracked(IMClient.connect(configuration(user, port: port)))
    }
}

/// The chat messages among a client's events, in arrival order, with a way to await a count.
actor ReceivedMessages {
    private(set) var ids: [String] = []
    private var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []

    init(_ events: AsyncStream<IMClient.Event>) {
        Task { await self.consume(events) }
    }

    private func consume(_ events: AsyncStream<IMClient.Event>) async {
        for await event in events {
            guard case .message(let message) = event else { continue }
            ids.append(message.messageID)
            let ready = waiters.filter { $0.count <= ids.count }
            waiters.removeAll { $0.count <= ids.count }
            for waiter in ready { waiter.continuation.resume() }
        }
    }

    /// Returns once `count` messages arrived; throws after `seconds`.
    func waitForCount(_ count: Int, within seconds: Double = 60) async throws {
        guard ids.count < count else { return }
        let timeout = Task { [weak self] in
            try await Task.sleep(for: .seconds(seconds))
            await self?.expire(count)
        }
        defer { timeout.cancel() }
        await withCheckedContinuation { waiters.append((count, $0)) }
        guard ids.count >= count else { throw TestError("only \(ids.count) of \(count) messages arrived within \(seconds) s") }
    }

    private func expire(_ count: Int) {
        let expired = waiters.filter { $0.count == count }
        waiters.removeAll { $0.count == count }
        for waiter in expired { waiter.continuation.resume() }
    }
}
