import Foundation
import IMGateway
import IMWire
import Testing
import Synchronization

@testable import IMClient
import IMTestSupport

/// limits.chat_rate against a real gateway and broker: a device that sends faster is refused
/// with RATE_LIMITED and RETRY_AFTER, and IMClient backs off and delivers everything in order.
@Suite("Chat rate limit", .stopsWhatItStarts, .timeLimit(.minutes(2)))
struct ChatRateLimitIntegrationTests {
    @Test("a device past limits.chat_rate: RATE_LIMITED with RETRY_AFTER; those refused were not delivered")
    func rawDevice() async throws {
        let gateway = try await TestGateway.start {
            $0.limits.chatRate = 5
            $0.limits.chatBurst = 3
        }
        let alice = try await gateway.device("alice", device: "phone")
        let bob = try await gateway.device("bob", device: "phone")
        var sequences: [UInt32] = []
        for index in 0..<8 {
            sequences.append(try await alice.send(.chat(ChatSend(to: "bob", messageID: "r\(index)", content: .text("\(index)")))))
        }
        var acks: [UInt32: Ack] = [:]
        while acks.count < sequences.count {
            if case .ack(let ack) = try await alice.next(within: 10, "the ACKs").1 { acks[ack.sequence] = ack }
        }
        let accepted = sequences.enumerated().filter { acks[$0.element]?.error == nil }.map(\.offset)
        let refused = sequences.filter { acks[$0]?.error == .rateLimited }
        #expect(accepted == [0, 1, 2], "the burst, then nothing until the retry time")
        #expect(refused.count == 5)
        #expect(refused.allSatisfy { (acks[$0]?.retryAfter ?? 0) >= 1 && (acks[$0]?.retryAfter ?? 0) <= 200 })
        var delivered: [String] = []
        while delivered.count < 3 {
            let (frame, message) = try await bob.next(within: 10, "the deliveries")
            if case .delivery(let delivery) = message {
                delivered.append(delivery.messageID)
                try await bob.ack(frame)
            }
        }
        #expect(delivered == ["r0", "r1", "r2"])
        await gateway.stop()
    }

    @Test("a device that ignores RATE_LIMITED is read a burst per pause, not refused frame by frame; a pair chatting at 50/s beside it loses nothing")
    func flooder() async throws {
        // The defaults: 2,000 a second, a burst of 2,000.
        let gateway = try await TestGateway.start()
        let alice = try await gateway.device("alice", device: "phone")
        let bob = try await gateway.device("bob", device: "phone")
        let mallory = try await gateway.device("mallory", device: "phone")
        // Mallory writes chats as fast as her socket takes them and never waits for an answer.
        let stop = Atomic<Bool>(false)
        let sent = Atomic<Int>(0)
        let flood = Task {
            var next = 0
            while !stop.load(ordering: .relaxed) {
                let batch = (next..<next + 500).map { IMMessage.chat(ChatSend(to: "carol", messageID: "f-\($0)", content: .text("x"))) }
                next += batch.count
                guard (try? await mallory.sendAll(batch)) != nil else { return }
                sent.add(batch.count, ordering: .relaxed)
            }
        }
        // What she is told piles up in her (unbounded) stream, unread: her socket is read
        // all the time, so the gateway's answers never hold it back.
        // Alice chats with bob at 50 a second for 3 s beside her.
        var ids: [String] = []
        for index in 0..<150 {
            ids.append("p-\(index)")
            try await alice.send(.chat(ChatSend(to: "bob", messageID: "p-\(index)", content: .text("\(index)"))))
            try await Task.sleep(for: .milliseconds(20))
        }
        stop.store(true, ordering: .relaxed)
        let flooded = sent.load(ordering: .relaxed)
        var received: [String] = []
        while received.count < ids.count {
            let (frame, message) = try await bob.next(within: 10, "alice's chats (\(received.count) of \(ids.count))")
            if case .delivery(let delivery) = message {
                received.append(delivery.messageID)
                try await bob.ack(frame)
            }
        }
        #expect(received == ids, "the pair lost nothing, in order")
        let refused = try await gateway.metric("imgw_chat_rate_limited_total")
        await mallory.drop()
        _ = await flood.result
        print("flood: \(flooded) chats written in 3 s, \(refused) refused")
        // Refused frame by frame, she is refused all the gateway can read of what she writes
        // (26,000 or more in 3 s here); read a burst per pause (1 s: the bucket's refill),
        // what a few reads hold.
        #expect(refused < 12_000, "\(refused) refusals for \(flooded) chats written")
        await gateway.stop()
    }

    @Test("IMClient sending 25 chats at once past the limit: every one delivered once, in order")
    func clientKeepsOrder() async throws {
        let gateway = try await TestGateway.start {
            $0.limits.chatRate = 20
            $0.limits.chatBurst = 5
        }
        let alice = try await gateway.client("alice", device: "phone")
        let bob = try await gateway.client("bob", device: "phone")
        let bobEvents = Collector(bob.events)
        let ids = (0..<25).map { "o\($0)" }
        // Enqueued in one visit to the actor, so that the outbox holds them in this order and
        // several are in flight when the gateway starts refusing.
        let entries = try await alice.enqueueChats(ids, to: "bob")
        for entry in entries {
            let ack = try await alice.outcome(of: entry)
            #expect(ack.error == nil)
        }
        var received: [String] = []
        while received.count < ids.count {
            received.append(try await nextMessage(bobEvents).messageID)
        }
        #expect(received == ids)
        await alice.close()
        await bob.close()
        await gateway.stop()
    }
}

/// limits.max_connections_per_address and max_connections_awaiting_login against a real gateway.
@Suite("Connection limits", .stopsWhatItStarts, .timeLimit(.minutes(2)))
struct ConnectionLimitTests {
    /// The ERROR a refused connection gets, then its close.
    private static func refused(_ device: TestDevice) async throws -> ErrorNotice {
        let (_, message) = try await device.next(within: 10, "the refusal")
        guard case .error(let notice) = message else { throw TestError("expected ERROR, got \(message)") }
        return notice
    }

    @Test("past max_connections_awaiting_login a new connection gets ERROR RATE_LIMITED and is closed; a login makes room; past max_connections_per_address too; logged-in devices keep chatting")
    func limits() async throws {
        let gateway = try await TestGateway.start {
            $0.limits.maxConnectionsAwaitingLogin = 2
            $0.limits.maxConnectionsPerAddress = 3
        }
        let minter = gateway.minter
        let first = try await TestDevice.connect(port: gateway.port)
        let second = try await TestDevice.connect(port: gateway.port)
        let third = try await TestDevice.connect(port: gateway.port)
        let notice = try await Self.refused(third)
        #expect(notice.code == .rateLimited)
        #expect(notice.message?.contains("waiting for LOGIN") == true)
        // A login makes room for one more waiting connection.
        try await first.login(token: try await minter.mint(user: "alice"), device: "phone")
        let fourth = try await TestDevice.connect(port: gateway.port)
        try await fourth.login(token: try await minter.mint(user: "bob"), device: "phone")
        // Three from 127.0.0.1 are open now (first, second, fourth): the next one is refused.
        let fifth = try await TestDevice.connect(port: gateway.port)
        let perAddress = try await Self.refused(fifth)
        #expect(perAddress.code == .rateLimited && perAddress.message?.contains("too many connections from 127.0.0.1") == true)
        // The logged-in devices are not affected.
        #expect(try await first.chat(to: "bob", id: "c1", text: "still here").error == nil)
        await second.drop()
        await gateway.stop()
    }
}

extension IMClient {
    /// Puts chats to `user` in the outbox in one visit to the actor.
    fileprivate func enqueueChats(_ ids: [String], to user: String) throws -> [OutboxEntry.ID] {
        try ids.map { id in
            try enqueue(.chat(ChatSend(to: user, messageID: id, content: .text(id))), priority: .chat, durable: true, timeout: configuration.sendTimeout)
        }
    }
}
