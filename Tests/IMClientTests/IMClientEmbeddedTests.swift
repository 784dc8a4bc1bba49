import IMWire
import NIOCore
import NIOEmbedded
import Synchronization
import Testing

@testable import IMClient

/// IMClient against a scripted gateway: embedded channels whose frames the test reads and
/// writes. Each dial of the client hands the test a new one, so reconnects are scripted too.
@Suite("IMClient over embedded channels", .timeLimit(.minutes(1)))
struct IMClientEmbeddedTests {
    @Test("login, then send: returns with the ACK's server time; a negative ACK throws refused")
    func sendAndRefusal() async throws {
        let network = ScriptedNetwork()
        let (client, gateway) = try await network.login()
        #expect(client.session.userID == "alice")
        #expect(client.session.heartbeatInterval == .seconds(300))

        async let sent = client.send(to: "bob", text: "hi", messageID: "m-1")
        let (frame, message) = try await gateway.next()
        guard case .chat(let chat) = message else {
            Issue.record("expected CHAT, got \(message)")
            return
        }
        #expect(chat.to == "bob")
        #expect(chat.messageID == "m-1")
        #expect(chat.content.text == "hi")
        #expect(!chat.resend)
        #expect(frame.header.sessionID == IMClient.sessionID)
        try await gateway.write(.ack(Ack(sequence: frame.header.sequence, messageID: "m-1", serverTime: 1_700_000_000_123)))
        #expect(try await sent == IMClient.SendReceipt(messageID: "m-1", serverTime: 1_700_000_000_123))

        let refused = Task { try await client.send(to: "bob", text: "again") }
        let (second, _) = try await gateway.next()
        #expect(second.header.sequence != frame.header.sequence)
        try await gateway.write(.ack(.refusing(sequence: second.header.sequence, code: .forbidden, message: "not you")))
        await #expect(throws: IMClientError.refused(.forbidden, "not you")) { try await refused.value }
        await client.close()
    }

    @Test("a delivery is surfaced and ACKed; its redelivery, also after a reconnect, is ACKed and not surfaced again")
    func deliveries() async throws {
        let network = ScriptedNetwork()
        let (client, gateway) = try await network.login()
        let delivery = ChatDelivery(from: "bob", messageID: "d-1", serverTime: 5, content: .text("hello"))
        try await gateway.write(.delivery(delivery), sequence: 40)
        var resent = delivery
        resent.resend = true
        try await gateway.write(.delivery(resent), sequence: 41)
        try await gateway.write(.presence(PresenceNotice(user: "bob", device: "phone", status: .online)), sequence: 42)

        var events = client.events.makeAsyncIterator()
        #expect(await events.next() == .message(IMClient.Message(from: "bob", messageID: "d-1", content: .text("hello"), serverTime: 5)))
        #expect(await events.next() == .presence(IMClient.Presence(user: "bob", device: "phone", status: .online)), "no second message")
        let acks = [try await gateway.next().0, try await gateway.next().0]
        #expect(acks.map(\.header.type) == [.ack, .ack])
        #expect(acks.map(\.header.sequence) == [40, 41])

        // The connection drops; the gateway redelivers on the next one.
        try await gateway.channel.close()
        guard case .reconnecting(let reconnecting) = await events.next() else {
            Issue.record("expected reconnecting")
            return
        }
        #expect(reconnecting.attempt == 0)
        #expect(reconnecting.delay <= network.backoff.level(0).upper)
        let second = try await network.acceptLogin()
        #expect(await events.next() == .reconnected(client.session))
        try await second.write(.delivery(resent), sequence: 7)
        try await second.write(.delivery(ChatDelivery(from: "bob", messageID: "d-2", serverTime: 6, content: .text("again"))), sequence: 8)
        #expect(await events.next() == .message(IMClient.Message(from: "bob", messageID: "d-2", content: .text("again"), serverTime: 6)))
        #expect(try await second.next().0.header.sequence == 7, "the duplicate is ACKed")
        await client.close()
        #expect(await events.next() == nil, "close finishes the events, without .disconnected")
    }

    @Test("login refused: the gateway's code and message; no reconnect")
    func loginRefused() async throws {
        let network = ScriptedNetwork()
        let client = Task { try await IMClient.connect(network.configuration, dialer: network.dialer) }
        let gateway = try await network.nextDial()
        let (login, request) = try await gateway.login()
        #expect(request.token == "token")
        #expect(request.deviceID == "phone")
        try await gateway.write(.error(ErrorNotice(code: .tokenExpired, message: "expired", refSequence: login.header.sequence)))
        await #expect(throws: IMClientError.loginRefused(.tokenExpired, "expired")) { try await client.value }
        #expect(network.dials == 1)
    }

    @Test("no ACK in time: the same message is written again with RESEND and a new sequence; the ACK of the copy returns")
    func retransmit() async throws {
        let network = ScriptedNetwork()
        network.configuration.ackTimeout = .seconds(1)
        // A test held up for seconds on a loaded machine must not see the connection replaced.
        network.configuration.maxRetransmits = 1_000
        let (client, gateway) = try await network.login()
        let sent = Task { try await client.send(to: "bob", text: "x", messageID: "m-9") }
        let (first, firstMessage) = try await gateway.next()
        let (copy, copyMessage) = try await gateway.next()
        guard case .chat(let original) = firstMessage, case .chat(let resent) = copyMessage else {
            Issue.record("expected two CHAT frames, got \(firstMessage), \(copyMessage)")
            sent.cancel()
            await client.close()
            return
        }
        #expect(original.messageID == "m-9" && resent.messageID == "m-9")
        #expect(!original.resend && resent.resend)
        #expect(copy.header.sequence != first.header.sequence)
        // The copy's ACK, and (if the test was held up past another ACK timeout) that of every
        // later copy, as the gateway would: only the ACK of the copy in flight counts.
        let acker = Task {
            var frame = copy
            while true {
                try await gateway.write(.ack(Ack(sequence: frame.header.sequence, messageID: "m-9", serverTime: 9)))
                frame = try await gateway.next().0
            }
        }
        #expect(try await sent.value.serverTime == 9)
        await client.close()
        _ = await acker.result
    }

    @Test("post: messages go out in call order without waiting for ACKs; each task ends with its ACK")
    func postKeepsOrder() async throws {
        let network = ScriptedNetwork()
        let (client, gateway) = try await network.login()
        var tasks: [Task<IMClient.SendReceipt, any Error>] = []
        for index in 0..<5 { tasks.append(try await client.post(to: "bob", content: .text("\(index)"), messageID: "o-\(index)")) }
        var frames: [IMFrame] = []
        for index in 0..<5 {
            let (frame, message) = try await gateway.next()
            guard case .chat(let chat) = message else {
                Issue.record("expected CHAT, got \(message)")
                return
            }
            #expect(chat.messageID == "o-\(index)", "written in call order")
            frames.append(frame)
        }
        // ACKs in reverse: each task gets its own.
        for (index, frame) in frames.enumerated().reversed() {
            try await gateway.write(.ack(Ack(sequence: frame.header.sequence, messageID: "o-\(index)", serverTime: UInt64(100 + index))))
        }
        for (index, task) in tasks.enumerated() {
            #expect(try await task.value == IMClient.SendReceipt(messageID: "o-\(index)", serverTime: UInt64(100 + index)))
        }
        await client.close()
    }

    @Test("an outbox store: a message saved by an earlier run is sent again at login with RESEND, and leaves the store once ACKed; new ones are saved until ACKed")
    func outboxStore() async throws {
        let store = InMemoryOutboxStore()
        let saved = OutboxEntry(
            id: 7, message: .chat(ChatSend(to: "bob", messageID: "left-over", content: .text("from before"))),
            priority: .chat, durable: true, attempts: 1)
        await store.save(saved)
        let network = ScriptedNetwork()
        network.configuration.outboxStore = store
        let (client, gateway) = try await network.login()

        let (frame, message) = try await gateway.next()
        guard case .chat(let chat) = message else {
            Issue.record("expected the saved CHAT, got \(message)")
            return
        }
        #expect(chat.messageID == "left-over" && chat.resend, "the same id, flagged as a resend")
        try await gateway.write(.ack(Ack(sequence: frame.header.sequence, messageID: "left-over", serverTime: 1)))

        let sent = Task { try await client.send(to: "bob", text: "new", messageID: "new-1") }
        let (second, _) = try await gateway.next()
        // Saving and removing run beside the writes: wait (briefly) for the store to settle.
        let expected: [IMMessage] = [.chat(ChatSend(to: "bob", messageID: "new-1", content: .text("new")))]
        let deadline = ContinuousClock.now + .seconds(5)
        while await store.load().map(\.message) != expected, ContinuousClock.now < deadline { await Task.yield() }
        #expect(await store.load().map(\.message) == expected, "the ACKed left-over is gone; the new one is kept until its ACK")
        try await gateway.write(.ack(Ack(sequence: second.header.sequence, messageID: "new-1", serverTime: 2)))
        _ = try await sent.value
        while await !store.load().isEmpty, ContinuousClock.now < deadline + .seconds(5) { await Task.yield() }
        #expect(await store.load().isEmpty, "ACKed: removed from the store")
        await client.close()
    }

    @Test("RATE_LIMITED is not final: the message is sent again after a pause and succeeds")
    func rateLimitedIsRetried() async throws {
        let network = ScriptedNetwork()
        let (client, gateway) = try await network.login()
        async let sent = client.send(to: "bob", text: "x", messageID: "m-5")
        let (first, _) = try await gateway.next()
        try await gateway.write(.ack(.refusing(sequence: first.header.sequence, code: .rateLimited, message: nil)))
        let (again, message) = try await gateway.next()
        guard case .chat(let chat) = message else {
            Issue.record("expected CHAT again, got \(message)")
            return
        }
        #expect(chat.messageID == "m-5")
        try await gateway.write(.ack(Ack(sequence: again.header.sequence, messageID: "m-5", serverTime: 3)))
        #expect(try await sent.serverTime == 3)
        #expect(await client.retriedRefusals == 1, "counted for diagnostics")
        await client.close()
    }

    /// A logged-in client that has posted q-0, q-1 and q-2, and the three frames written.
    static func threeChatsWritten() async throws -> (IMClient, ScriptedGateway, [Task<IMClient.SendReceipt, any Error>], [IMFrame]) {
        let (client, gateway) = try await ScriptedNetwork().login()
        var tasks: [Task<IMClient.SendReceipt, any Error>] = []
        for index in 0..<3 { tasks.append(try await client.post(to: "bob", content: .text("\(index)"), messageID: "q-\(index)")) }
        var written: [IMFrame] = []
        for _ in 0..<3 { written.append(try await gateway.next().0) }
        return (client, gateway, tasks, written)
    }

    /// Whether the client pauses chat (it has read a RATE_LIMITED), within 10,000 yields.
    static func chatPaused(_ client: IMClient) async -> Bool {
        for _ in 0..<10_000 {
            if await client.chatPausedUntil != nil { return true }
            await Task.yield()
        }
        return false
    }

    /// Reads `count` frames, ACKs each with `serverTime`, and returns their message ids in the
    /// order written; throws on a frame that is not a CHAT.
    static func ackChats(_ count: Int, from gateway: ScriptedGateway, serverTime: UInt64) async throws -> [String] {
        var order: [String] = []
        while order.count < count {
            let (frame, message) = try await gateway.next()
            guard case .chat(let chat) = message else { throw IMClientError.protocolViolation("expected CHAT, got \(message)") }
            order.append(chat.messageID)
            try await gateway.write(.ack(Ack(sequence: frame.header.sequence, messageID: chat.messageID, serverTime: serverTime)))
        }
        return order
    }

    @Test("RATE_LIMITED with RETRY_AFTER: the refused chats go back to their places, no chat is written before the pause ends, then all in order")
    func rateLimitedKeepsOrder() async throws {
        let (client, gateway, posted, refused) = try await Self.threeChatsWritten()
        var tasks = posted
        // The gateway refuses all three (it refuses every chat until the retry time).
        for frame in refused {
            try await gateway.write(.ack(.rateLimited(sequence: frame.header.sequence, retryAfter: 100)))
        }
        // Once the client has read the refusals it pauses chat; a chat posted then waits
        // behind the refused ones.
        #expect(await Self.chatPaused(client), "the client read RATE_LIMITED and paused chat")
        tasks.append(try await client.post(to: "bob", content: .text("3"), messageID: "q-3"))
        let order = try await Self.ackChats(4, from: gateway, serverTime: 7)
        #expect(order == ["q-0", "q-1", "q-2", "q-3"])
        for task in tasks { #expect(try await task.value.serverTime == 7) }
        #expect(await client.retriedRefusals == 3)
        await client.close()
    }

    @Test("RATE_LIMITED whose pause has passed before the other refusals are read: chat waits for the answers of those in flight, then all go in order")
    func rateLimitedWaitsForAnswers() async throws {
        let (client, gateway, posted, refused) = try await Self.threeChatsWritten()
        var tasks = posted
        // The first refusal's pause (1 ms) passes long before the other two are answered.
        try await gateway.write(.ack(.rateLimited(sequence: refused[0].header.sequence, retryAfter: 1)))
        #expect(await Self.chatPaused(client), "the client read RATE_LIMITED and paused chat")
        try await Task.sleep(for: .milliseconds(50))
        tasks.append(try await client.post(to: "bob", content: .text("3"), messageID: "q-3"))
        try await Task.sleep(for: .milliseconds(20))
        for frame in refused.dropFirst() {
            try await gateway.write(.ack(.rateLimited(sequence: frame.header.sequence, retryAfter: 1)))
        }
        let order = try await Self.ackChats(4, from: gateway, serverTime: 7)
        #expect(order == ["q-0", "q-1", "q-2", "q-3"], "nothing written while q-1 and q-2 were in flight")
        for task in tasks { #expect(try await task.value.serverTime == 7) }
        await client.close()
    }

    @Test("retransmits exhausted: the connection is replaced, and the message is sent on the new one with RESEND")
    func retransmitsExhausted() async throws {
        let network = ScriptedNetwork()
        network.configuration.ackTimeout = .milliseconds(300)
        network.configuration.maxRetransmits = 1
        let (client, gateway) = try await network.login()
        var events = client.events.makeAsyncIterator()
        // The send's outcome and every new connection, in the order they happen. The send is a
        // task, not `async let`: an early return must not wait for a send nobody will answer
        // (closing the client at the end fails it instead).
        let (outcomes, sink) = AsyncStream.makeStream(of: SendOrDial.self)
        let dials = Task { while let next = try? await network.nextDial() { sink.yield(.dialed(next)) } }
        let sent = Task {
            do { sink.yield(.sent(.success(try await client.send(to: "bob", text: "x", messageID: "m-7")))) }
            catch { sink.yield(.sent(.failure(error))) }
        }
        defer { dials.cancel(); sent.cancel() }
        _ = try await gateway.next()
        _ = try await gateway.next()
        guard case .reconnecting(let reconnecting) = await events.next() else {
            Issue.record("expected reconnecting")
            await client.close()
            return
        }
        #expect(reconnecting.cause == .timeout)
        // The CHAT again, with RESEND, on the new connection. On a loaded machine the 300 ms
        // can pass again before this test answers, and the client then moves on to another
        // connection: answer the resend on whichever connection carries it.
        var answered: Result<IMClient.SendReceipt, any Error>?
        var connections = 0
        outcomes: for await outcome in outcomes {
            switch outcome {
            case .sent(let result):
                answered = result
                break outcomes
            case .dialed(let next):
                connections += 1
                guard connections <= 4 else { break outcomes }
                try await next.acceptLogin()
                let (frame, message) = try await next.next()
                guard case .chat(let chat) = message else {
                    Issue.record("expected the CHAT again, got \(message)")
                    break outcomes
                }
                #expect(chat.messageID == "m-7" && chat.resend)
                try? await next.write(.ack(Ack(sequence: frame.header.sequence, messageID: "m-7", serverTime: 1)))
            }
        }
        await client.close()
        #expect(try answered?.get().messageID == "m-7")
    }

    /// What `retransmitsExhausted` waits for next.
    private enum SendOrDial: Sendable {
        case sent(Result<IMClient.SendReceipt, any Error>)
        case dialed(ScriptedGateway)
    }

    @Test("while disconnected, messages wait in the outbox; after the login they go out chat first, then receipts, then pub/sub")
    func priorities() async throws {
        let network = ScriptedNetwork()
        let (client, gateway) = try await network.login()
        var events = client.events.makeAsyncIterator()
        network.refuseDials(true)
        try await gateway.channel.close()
        guard case .reconnecting = await events.next() else { return }
        let publish = Task { try await client.publish(topic: "im/t/news", payload: Array("p".utf8), qos: .atLeastOnce) }
        let receipt = Task { try await client.sendReadReceipt(to: "bob", messageID: "b-1") }
        let chat = Task { try await client.send(to: "bob", text: "c", messageID: "c-1") }
        // Wait until all three are queued (the failed dials keep the client disconnected).
        while await client.outbox.count < 3 { await Task.yield() }
        await #expect(throws: IMClientError.disconnected, "a watch needs the connection now") { try await client.watchPresence(["bob"]) }
        network.refuseDials(false)
        await client.networkAvailable()
        let second = try await network.acceptLogin()
        var kinds: [String] = []
        var frames: [IMFrame] = []
        for _ in 0..<4 {
            let (frame, message) = try await second.next()
            switch message {
            case .chat(let chat): kinds.append("chat:\(chat.resend)")
            case .readReceipt: kinds.append("receipt")
            case .publish(let publish): kinds.append("publish:\(publish.resend)")
            case .presenceWatch: kinds.append("watch")
            default: kinds.append("\(message)")
            }
            frames.append(frame)
        }
        #expect(kinds == ["chat:false", "receipt", "watch", "publish:false"], "chat, receipts, presence (the restored watch), pub/sub")
        for frame in frames { try await second.write(.ack(Ack(sequence: frame.header.sequence))) }
        _ = try await (publish.value, receipt.value, chat.value)
        await client.close()
    }

    @Test("KICK SESSION_TAKEN_OVER: kicked, then disconnected, and no reconnect")
    func takenOver() async throws {
        let network = ScriptedNetwork()
        let (client, gateway) = try await network.login()
        var events = client.events.makeAsyncIterator()
        try await gateway.write(.kick(Kick(reason: .sessionTakenOver, message: "elsewhere")))
        #expect(await events.next() == .kicked(.sessionTakenOver, "elsewhere"))
        #expect(await events.next() == .disconnected)
        #expect(await events.next() == nil)
        #expect(network.dials == 1)
        await #expect(throws: IMClientError.disconnected) { try await client.send(to: "bob", text: "late") }
    }

    @Test("KICK SERVER_SHUTTING_DOWN: kicked, then reconnecting, then reconnected")
    func shutdownKickReconnects() async throws {
        let network = ScriptedNetwork()
        let (client, gateway) = try await network.login()
        var events = client.events.makeAsyncIterator()
        try await gateway.write(.kick(Kick(reason: .serverShuttingDown, message: nil)))
        #expect(await events.next() == .kicked(.serverShuttingDown, nil))
        guard case .reconnecting(let reconnecting) = await events.next() else {
            Issue.record("expected reconnecting")
            return
        }
        #expect(reconnecting.cause == .kicked(.serverShuttingDown, nil))
        _ = try await network.acceptLogin()
        #expect(await events.next() == .reconnected(client.session))
        await client.close()
    }

    @Test("heartbeats when idle; unanswered ones declare the connection dead within the policy's bound, then it reconnects")
    func heartbeatAndDeadConnection() async throws {
        let network = ScriptedNetwork()
        // Heartbeats soon, ACK timeouts long enough for the test to answer the first one on a
        // machine busy with the rest of the suite.
        network.configuration.heartbeat = AdaptiveHeartbeat.Configuration(
            minInterval: .milliseconds(200), maxInterval: .milliseconds(400),
            minAckTimeout: .seconds(2), maxAckTimeout: .seconds(3))
        let (client, gateway) = try await network.login()
        let (beat, _) = try await gateway.next()
        #expect(beat.header.type == .heartbeat)
        #expect(beat.body.readableBytes == 0)
        try await gateway.write(.ack(Ack(sequence: beat.header.sequence)))
        // Now nothing comes back.
        let silent = ContinuousClock.now
        let heartbeat = await client.heartbeat!
        let bound = heartbeat.detectionBound
        var events = client.events.makeAsyncIterator()
        // The connection is dead after `failuresUntilDead` heartbeats went unanswered, not before.
        for _ in 0..<heartbeat.configuration.failuresUntilDead {
            let (unanswered, _) = try await gateway.next()
            #expect(unanswered.header.type == .heartbeat)
        }
        guard case .reconnecting(let reconnecting) = await events.next() else {
            Issue.record("expected reconnecting")
            return
        }
        let took = ContinuousClock.now - silent
        #expect(reconnecting.cause == .connectionDead)
        // The bound is the policy's (AdaptiveHeartbeatTests checks it on a virtual clock); on
        // this real clock a machine busy with the rest of the suite delays every timer, so the
        // slack is wide. A detector that ignored this configuration would take the default
        // heartbeat's 30 s and more, or never fire.
        #expect(took <= bound + .seconds(10), "dead after \(took), bound \(bound)")
        _ = try await network.acceptLogin()
        await client.close()
    }

    @Test("networkAvailable on a silent connection: one probe, dead after one ACK timeout (not three), then it reconnects")
    func probeAfterNetworkReturns() async throws {
        let network = ScriptedNetwork()
        // Heartbeats far apart: only the probe can find the silence in time.
        network.configuration.heartbeat = AdaptiveHeartbeat.Configuration(
            minInterval: .seconds(60), maxInterval: .seconds(120),
            minAckTimeout: .milliseconds(300), maxAckTimeout: .seconds(5))
        let (client, gateway) = try await network.login()
        var events = client.events.makeAsyncIterator()
        // No heartbeat has been answered yet: the RTT comes from the login's round trip.
        #expect(await client.heartbeat!.smoothedRTT != nil, "the login round trip seeds the RTT")
        let ackTimeout = await client.heartbeat!.ackTimeout
        let back = ContinuousClock.now
        await client.networkAvailable()
        let (probe, _) = try await gateway.next()
        #expect(probe.header.type == .heartbeat)
        // The gateway never answers: the old path is gone.
        guard case .reconnecting(let reconnecting) = await events.next() else {
            Issue.record("expected reconnecting")
            return
        }
        let took = ContinuousClock.now - back
        #expect(reconnecting.cause == .connectionDead)
        // One probe, not the three heartbeats of a dead connection found by the schedule: the
        // old connection carried nothing after it.
        #expect(try await gateway.channel.readOutbound(as: IMFrame.self) == nil, "only one probe")
        // (Far from the heartbeat's 60 s; a busy machine delays the timer, so some slack.)
        #expect(took >= ackTimeout && took < ackTimeout + .seconds(10), "dead after \(took); one ACK timeout is \(ackTimeout)")
        _ = try await network.acceptLogin()
        await client.close()
    }

    @Test("networkAvailable on a live connection: the probe is answered and nothing else happens")
    func probeAnswered() async throws {
        let network = ScriptedNetwork()
        let (client, gateway) = try await network.login()
        await client.networkAvailable()
        let (probe, _) = try await gateway.next()
        #expect(probe.header.type == .heartbeat)
        try await gateway.write(.ack(Ack(sequence: probe.header.sequence)))
        async let sent = client.send(to: "bob", text: "still here", messageID: "m-1")
        let (frame, _) = try await gateway.next()
        try await gateway.write(.ack(Ack(sequence: frame.header.sequence, messageID: "m-1", serverTime: 7)))
        #expect(try await sent.serverTime == 7)
        #expect(await !client.heartbeat!.isDead)
        #expect(network.dials == 1, "no reconnect")
        await client.close()
    }

    @Test("networkChanged: the connection is replaced at once (no backoff), and what was in flight goes out again with RESEND")
    func networkChanged() async throws {
        let network = ScriptedNetwork()
        network.backoff = ReconnectBackoff(base: .seconds(30), cap: .seconds(60))  // a backoff would show
        let (client, gateway) = try await network.login()
        var events = client.events.makeAsyncIterator()
        let sending = Task { try await client.send(to: "bob", text: "moving", messageID: "m-1") }
        let (first, _) = try await gateway.next()
        let changed = ContinuousClock.now
        await client.networkChanged()
        guard case .reconnecting(let reconnecting) = await events.next() else {
            Issue.record("expected reconnecting")
            return
        }
        #expect(reconnecting.cause == .networkChanged)
        #expect(reconnecting.delay == .zero)
        let second = try await network.acceptLogin()
        guard case .reconnected = await events.next() else {
            Issue.record("expected reconnected")
            return
        }
        #expect(ContinuousClock.now - changed < .seconds(15), "no backoff delay (it would be 30 s or more)")
        let (again, message) = try await second.next()
        guard case .chat(let chat) = message else {
            Issue.record("expected the chat message again, got \(message)")
            return
        }
        #expect(chat.messageID == "m-1")
        #expect(chat.resend)
        #expect(again.header.sequence != first.header.sequence)
        try await second.write(.ack(Ack(sequence: again.header.sequence, messageID: "m-1", serverTime: 9)))
        #expect(try await sending.value.serverTime == 9)
        #expect(network.dials == 2)
        await client.close()
    }

    @Test("close while waiting to reconnect: the events end, nothing is dialled again, requests fail")
    func closeWhileWaiting() async throws {
        let network = ScriptedNetwork()
        network.backoff = ReconnectBackoff(base: .seconds(5), cap: .seconds(10))
        let (client, gateway) = try await network.login()
        var events = client.events.makeAsyncIterator()
        let pending = Task { try await client.send(to: "bob", text: "never") }
        _ = try await gateway.next()
        try await gateway.channel.close()
        guard case .reconnecting = await events.next() else { return }
        await client.close()
        #expect(await events.next() == nil)
        await #expect(throws: IMClientError.disconnected) { try await pending.value }
        #expect(network.dials == 1)
        #expect(await client.connectionState == .disconnected)
    }
}

/// The gateway side of one embedded channel carrying frames (no codec).
struct ScriptedGateway: Sendable {
    let channel: NIOAsyncTestingChannel

    /// The next frame the client wrote, decoded. The testing channel's wait does not end on
    /// cancellation (so a test's time limit cannot stop it): if no frame comes within
    /// `seconds`, the channel is closed, which ends the wait, and this throws.
    func next(within seconds: Int = 20) async throws -> (IMFrame, IMMessage) {
        let timedOut = Mutex(false)
        let channel = self.channel
        let watchdog = Task {
            try await Task.sleep(for: .seconds(seconds))
            timedOut.withLock { $0 = true }
            try? await channel.close()
        }
        defer { watchdog.cancel() }
        let frame: IMFrame
        do {
            frame = try await channel.waitForOutboundWrite(as: IMFrame.self)
        } catch {
            if timedOut.withLock({ $0 }) { throw IMClientError.protocolViolation("no frame from the client within \(seconds) s") }
            throw error
        }
        return (frame, try IMMessage(frame: frame))
    }

    func write(_ message: IMMessage, sequence: UInt32 = 1) async throws {
        try await channel.writeInbound(message.frame(sequence: sequence, timestamp: 1_700_000_000, sessionID: IMClient.sessionID))
    }

    /// The LOGIN the client wrote.
    func login() async throws -> (IMFrame, LoginRequest) {
        let (frame, message) = try await next()
        guard case .login(let request) = message else { throw IMClientError.protocolViolation("expected LOGIN, got \(message)") }
        return (frame, request)
    }

    /// The SERVER_TIME of every LOGIN_OK (Unix milliseconds).
    static let serverTime: UInt64 = 1

    /// Reads LOGIN and answers LOGIN_OK for alice, with TOKEN_EXPIRY if given; returns the LOGIN.
    @discardableResult
    func acceptLogin(tokenExpiry: UInt64? = nil) async throws -> LoginRequest {
        let (frame, request) = try await login()
        try await write(.loginOK(LoginOK(
            userID: "alice", deviceID: "phone", serverTime: Self.serverTime, heartbeatInterval: 300,
            tokenExpiry: tokenExpiry, refSequence: frame.header.sequence)))
        return request
    }
}

/// Hands the client a new scripted gateway per dial, and the test each one.
final class ScriptedNetwork: Sendable {
    private struct State {
        // The login's time limit is long: these tests script the gateway and never check that
        // limit, and on a machine busy with the rest of the suite (brokers, ejabberd nodes and
        // gateways starting by the dozen) the test's own answer can come seconds late.
        var configuration = IMClient.Configuration(
            token: "token", deviceID: "phone", connectTimeout: .seconds(60),
            backoff: ReconnectBackoff(base: .milliseconds(50), cap: .milliseconds(400)))
        var dials = 0
        var refusing = false
    }
    private let state = Mutex(State())
    private let dialed: AsyncStream<ScriptedGateway>
    private let dialedSink: AsyncStream<ScriptedGateway>.Continuation

    init() {
        (dialed, dialedSink) = AsyncStream.makeStream()
    }

    var configuration: IMClient.Configuration {
        get { state.withLock { $0.configuration } }
        set { state.withLock { $0.configuration = newValue } }
    }
    var backoff: ReconnectBackoff {
        get { configuration.backoff }
        set { configuration.backoff = newValue }
    }
    var dials: Int { state.withLock { $0.dials } }

    /// Dials fail (connection refused) while `on`.
    func refuseDials(_ on: Bool) { state.withLock { $0.refusing = on } }

    var dialer: IMClient.Dialer {
        { [self] _ in
            let refusing = state.withLock { state -> Bool in
                if !state.refusing { state.dials += 1 }
                return state.refusing
            }
            if refusing { throw IOError(errnoCode: 111, reason: "connect") }
            let channel = NIOAsyncTestingChannel()
            try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 6969)).get()
            let async = try await channel.testingEventLoop.executeInContext {
                try NIOAsyncChannel<IMFrame, IMFrame>(wrappingChannelSynchronously: channel)
            }
            dialedSink.yield(ScriptedGateway(channel: channel))
            return async
        }
    }

    /// The gateway of the next dial.
    func nextDial() async throws -> ScriptedGateway {
        var iterator = dialed.makeAsyncIterator()
        guard let gateway = await iterator.next() else { throw IMClientError.disconnected }
        return gateway
    }

    /// The next dial, logged in (LOGIN_OK with TOKEN_EXPIRY if given).
    func acceptLogin(tokenExpiry: UInt64? = nil) async throws -> ScriptedGateway {
        let gateway = try await nextDial()
        try await gateway.acceptLogin(tokenExpiry: tokenExpiry)
        return gateway
    }

    /// Connects a client and answers its LOGIN with LOGIN_OK for alice (with TOKEN_EXPIRY if given).
    func login(tokenExpiry: UInt64? = nil) async throws -> (IMClient, ScriptedGateway) {
        let configuration = self.configuration
        async let client = IMClient.connect(configuration, dialer: dialer)
        let gateway = try await acceptLogin(tokenExpiry: tokenExpiry)
        return (try await client, gateway)
    }
}
