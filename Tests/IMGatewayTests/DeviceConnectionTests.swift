@testable import IMGateway
import IMArchive
import IMWire
import Logging
import Foundation
import Mosquitto
import NIOCore
import NIOEmbedded
import Synchronization
import Testing

/// ``DeviceConnection`` on a testing channel, with its MQTT side played by
/// ``FakeDeviceSession``: no broker, no sockets, time advanced by the test.
@Suite("DeviceConnection on a testing channel", .timeLimit(.minutes(1)))
struct DeviceConnectionTests {
    static let secret = "device-connection-test-secret"

    /// One connection and what it opened.
    struct Harness {
        let loop: NIOAsyncTestingEventLoop
        let channel: NIOAsyncTestingChannel
        let sessions: AsyncStream<FakeDeviceSession>
        let minter = TokenMinter(secret: DeviceConnectionTests.secret)
        let context: GatewayContext
        /// The gateway's own session, for chats the device's session could not publish.
        let relay: FakeRelay
        let sequence = Counter()
        /// How many sessions the connection made (one per CONNECT it tried).
        let sessionsMade: Counter

        /// The device's frame sequence numbers.
        final class Counter: Sendable {
            private let value = Mutex<UInt32>(0)
            func next() -> UInt32 {
                value.withLock {
                    $0 += 1
                    return $0
                }
            }
            var current: UInt32 { value.withLock { $0 } }
        }

        /// A connection on a testing channel; the first sessions' CONNECTs are refused with
        /// `refusals`, in turn.
        static func start(
            refusing refusals: [ReasonCode] = [], archive: MessageArchive? = nil, _ configure: (inout GatewayConfiguration) -> Void = { _ in }
        ) async throws -> Harness {
            let made = Counter()
            var configuration = GatewayConfiguration.defaults
            configuration.auth.jwtSecret = DeviceConnectionTests.secret
            configure(&configuration)
            let (sessions, created) = AsyncStream<FakeDeviceSession>.makeStream()
            let topics = GatewayTopics(prefix: configuration.topicPrefix, pubsubSpace: configuration.pubsub.topicSpace)
            var logger = Logger(label: "device-connection-test")
            logger.logLevel = .critical
            let context = GatewayContext(
                configuration: configuration, broker: BrokerEndpoint(host: "127.0.0.1", port: 1), mqttLoop: .shared, logger: logger,
                archive: archive
            ) { user, device, receiptNotices in
                let index = Int(made.next()) - 1
                let session = FakeDeviceSession(
                    user: user, device: device, receiptNotices: receiptNotices, topics: topics,
                    refusal: index < refusals.count ? refusals[index] : nil)
                created.yield(session)
                return session
            }
            let loop = NIOAsyncTestingEventLoop()
            let channel = NIOAsyncTestingChannel(loop: loop)
            let relay = FakeRelay()
            try await channel.pipeline.addHandler(DeviceConnection(gateway: context, acceptance: ChatAcceptance(context: context, relay: relay), peer: "test", clock: EventLoopClock(loop)))
            try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1))
            return Harness(loop: loop, channel: channel, sessions: sessions, context: context, relay: relay, sessionsMade: made)
        }

        /// Another connection to the same gateway, on the same event loop.
        func anotherChannel() async throws -> NIOAsyncTestingChannel {
            let channel = NIOAsyncTestingChannel(loop: loop)
            try await channel.pipeline.addHandler(DeviceConnection(gateway: context, acceptance: ChatAcceptance(context: context, relay: relay), peer: "test-2", clock: EventLoopClock(loop)))
            try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 2))
            return channel
        }

        /// Sends a frame from the device; returns its sequence.
        @discardableResult
        func send(_ message: IMMessage, sessionID: UInt16 = 3) async throws -> UInt32 {
            let number = sequence.next()
            try await channel.writeInbound(message.frame(sequence: number, timestamp: 1, sessionID: sessionID))
            return number
        }

        /// The next frame the gateway wrote; if none comes within `seconds` (real time), the
        /// channel is closed, which fails the wait (the testing channel's waits do not end on
        /// cancellation).
        func next(within seconds: Int = 10) async throws -> (IMFrame, IMMessage) {
            let frame = try await bounded(seconds, "a frame from the gateway") {
                while true {
                    if let frame = try written.next() { return frame }
                    written.append(try await channel.waitForOutboundWrite(as: ByteBuffer.self))
                }
            }
            return (frame, try IMMessage(frame: frame))
        }

        /// The bytes the connection wrote (several frames to a write, at a turn's end), as frames.
        let written = WrittenFrames()

        final class WrittenFrames: Sendable {
            private let state = Mutex((bytes: ByteBuffer(), decoder: IMFrameDecoder()))

            func append(_ buffer: ByteBuffer) {
                var buffer = buffer
                state.withLock { $0.bytes.writeBuffer(&buffer) }
            }

            func next() throws -> IMFrame? {
                try state.withLock { state in try state.decoder.decode(buffer: &state.bytes) }
            }
        }

        /// Runs `wait`; past `seconds` the channel is closed (ending the wait) and this throws.
        func bounded<T: Sendable>(_ seconds: Int, _ what: String, _ wait: () async throws -> T) async throws -> T {
            let timedOut = Mutex(false)
            let channel = self.channel
            let watchdog = Task {
                try await Task.sleep(for: .seconds(seconds))
                timedOut.withLock { $0 = true }
                try? await channel.close()
            }
            defer { watchdog.cancel() }
            let result: Result<T, any Error>
            do { result = .success(try await wait()) } catch { result = .failure(error) }
            if timedOut.withLock({ $0 }) { throw Failure("no \(what) within \(seconds) s") }
            return try result.get()
        }

        /// Logs in as `user` with session id 3; returns LOGIN_OK's frame and the session.
        func login(_ user: String = "alice", validFor seconds: Int = 3600) async throws -> (IMFrame, FakeDeviceSession) {
            let token = try await minter.mint(user: user, validFor: seconds)
            try await send(.login(LoginRequest(token: token, deviceID: "phone")))
            let (frame, message) = try await next()
            guard case .loginOK = message else { throw Failure("expected LOGIN_OK, got \(message)") }
            var iterator = sessions.makeAsyncIterator()
            guard let session = await iterator.next() else { throw Failure("no session was opened") }
            return (frame, session)
        }

        /// Waits (at most 10 s) for the gateway to close the channel.
        func closed() async throws {
            try await bounded(10, "close") { try await channel.closeFuture.get() }
        }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    static func ended(_ session: FakeDeviceSession) async -> ConnectionStateMachine.CloseReason? {
        await session.next { if case .end(let reason) = $0 { reason } else { nil } }
    }

    static func chatMessage(from sender: String, to recipient: String, id: String, deliveryID: UInt64) -> MosquittoMessage {
        let payload = ChatPayload(send: ChatSend(to: recipient, messageID: id, content: .text("hi")), from: sender, serverTime: 1)
        return MosquittoMessage(topic: "im/u/\(recipient)/inbox", payload: PayloadCodec.encode(payload), qos: .atLeastOnce, deliveryID: deliveryID)
    }

    @Test("the handler keeps I/O plumbing only: at most 8 stored properties (the data path is the machine's)")
    func handlerIsPlumbing() async throws {
        let harness = try await Harness.start()
        let connection = DeviceConnection(gateway: harness.context, acceptance: ChatAcceptance(context: harness.context, relay: harness.relay), peer: "count", clock: EventLoopClock(harness.loop))
        let stored = Mirror(reflecting: connection).children.compactMap(\.label)
        #expect(stored.count <= 8, "\(stored)")
        #expect(stored.contains("machine"))
        try await harness.channel.close()
    }

    @Test("login: LOGIN_OK refers to the LOGIN and carries its session id; the session announces, then subscribes (a delivery after the SUBACK holds its writes), then probes")
    func login() async throws {
        let harness = try await Harness.start()
        try await harness.send(.heartbeat, sessionID: 9)
        let (beat, _) = try await harness.next()
        #expect(beat.header.type == .ack && beat.header.sessionID == 9)
        let (frame, session) = try await harness.login()
        #expect(frame.header.sessionID == 3)
        guard case .loginOK(let ok) = try IMMessage(frame: frame) else { return }
        #expect(ok.userID == "alice" && ok.deviceID == "phone" && ok.refSequence == 2)
        #expect(ok.sessionResumed == false, "the fake broker keeps no session")
        var calls: [String] = []
        while calls.count < 3, let call = await session.next({ $0 }) {
            switch call {
            case .publish(let publish): calls.append(publish.topic + (publish.retain ? " retained" : ""))
            case .subscribe(let filters): calls.append("subscribe " + filters.joined(separator: " "))
            default: continue
            }
        }
        #expect(calls == [
            "im/u/alice/presence/phone retained",
            "subscribe im/u/alice/inbox im/u/alice/receipts im/u/alice/signal im/u/alice/presence/+",
            "im/u/alice/signal",
        ])
        try await harness.channel.close()
    }

    @Test("chat: handed to the session in one batch, ACKed once the broker took it, refused when it did not")
    func chat() async throws {
        let harness = try await Harness.start()
        let (_, session) = try await harness.login()
        let sequence = try await harness.send(.chat(ChatSend(to: "bob", messageID: "m-1", content: .text("hi"))))
        let sent = await session.next { if case .chats(let chats) = $0 { chats } else { nil } }
        #expect(sent?.map(\.topic) == ["im/u/bob/inbox"])
        let (ackFrame, ack) = try await harness.next()
        #expect(ack == .ack(Ack(sequence: sequence, messageID: "m-1", serverTime: ackFrame.ackServerTime)))
        session.chatFailure.withLock { $0 = .closed }
        let refused = try await harness.send(.chat(ChatSend(to: "bob", messageID: "m-2", content: .text("again"))))
        let (_, negative) = try await harness.next()
        guard case .ack(let nack) = negative else { throw Failure("expected a negative ACK, got \(negative)") }
        #expect(nack.sequence == refused && nack.error == .brokerUnavailable)
        try await harness.channel.close()
    }

    @Test("chat past limits.chat_rate: RATE_LIMITED with RETRY_AFTER, nothing published; the ones before it go")
    func chatRateLimited() async throws {
        let harness = try await Harness.start {
            $0.limits.chatRate = 1
            $0.limits.chatBurst = 2
        }
        let (_, session) = try await harness.login()
        var sequences: [UInt32] = []
        for index in 1...4 {
            sequences.append(try await harness.send(.chat(ChatSend(to: "bob", messageID: "m\(index)", content: .text("hi")))))
        }
        var acks: [UInt32: Ack] = [:]
        while acks.count < 4 {
            if case .ack(let ack) = try await harness.next().1 { acks[ack.sequence] = ack }
        }
        #expect(acks[sequences[0]]?.error == nil && acks[sequences[1]]?.error == nil)
        for sequence in sequences[2...] {
            #expect(acks[sequence]?.error == .rateLimited)
            #expect((acks[sequence]?.retryAfter ?? 0) > 0 && (acks[sequence]?.retryAfter ?? 0) <= 1000)
        }
        // Everything the session was asked, up to its end: the first two chats only.
        try await harness.channel.close()
        var published: [String] = []
        for await call in session.calls {
            if case .chats(let chats) = call { published += chats.map { String(decoding: $0.payload, as: UTF8.self) } }
            if case .end = call { break }
        }
        #expect(published.count == 2, "only the first two reached the broker")
        #expect(published.allSatisfy { !$0.contains("m3") && !$0.contains("m4") })
    }

    @Test("a delivery's ACK acknowledges it to the broker; its delivered receipt follows within the window")
    func deliveryAcknowledged() async throws {
        let harness = try await Harness.start()
        let (_, session) = try await harness.login()
        session.deliver(Self.chatMessage(from: "bob", to: "alice", id: "d-1", deliveryID: 77))
        let (frame, message) = try await harness.next()
        guard case .delivery(let delivery) = message else { throw Failure("expected a delivery, got \(message)") }
        #expect(delivery.messageID == "d-1" && delivery.from == "bob")
        #expect(frame.header.sessionID == 3)
        try await harness.channel.writeInbound(frame.ack(timestamp: 1))
        let acknowledged = await session.next { if case .send(let ids, _) = $0, !ids.isEmpty { ids } else { nil } }
        #expect(acknowledged == [77])
        await harness.loop.advanceTime(by: Uplink<PendingChat>.receiptWindow)
        let receipts = await session.next { if case .send(_, let receipts) = $0, !receipts.isEmpty { receipts } else { nil } }
        #expect(receipts?.map(\.topic) == ["im/u/bob/receipts"])
        // Acknowledged in time: no deadline passes.
        await harness.loop.advanceTime(by: .seconds(60))
        #expect(harness.channel.isActive)
        try await harness.channel.close()
    }

    @Test("a delivery never ACKed: KICK IDLE_TIMEOUT at the delivery ACK timeout, the session ends without acknowledging it")
    func deliveryTimeout() async throws {
        let harness = try await Harness.start { $0.limits.deliveryAckTimeout = 30 }
        let (_, session) = try await harness.login()
        session.deliver(Self.chatMessage(from: "bob", to: "alice", id: "d-2", deliveryID: 78))
        _ = try await harness.next()
        await harness.loop.advanceTime(by: .seconds(29))
        #expect(harness.channel.isActive)
        await harness.loop.advanceTime(by: .seconds(1))
        let (kickFrame, kick) = try await harness.next()
        #expect(kick == .kick(Kick(reason: .idleTimeout, message: "delivery not acknowledged within 30 s")))
        #expect(kickFrame.header.sessionID == 3)
        try await harness.closed()
        var acknowledged: [UInt64] = []
        let reason = await session.next { call -> ConnectionStateMachine.CloseReason? in
            if case .send(let ids, _) = call { acknowledged += ids }
            if case .end(let why) = call { return why }
            return nil
        }
        #expect(reason == .deliveryTimeout)
        #expect(acknowledged.isEmpty, "the broker keeps it, and redelivers it at the next login")
    }

    @Test("a token that expires: KICK TOKEN_EXPIRED, then the session ends (leeway counted)")
    func tokenExpiry() async throws {
        let harness = try await Harness.start { $0.auth.leeway = 5 }
        let (_, session) = try await harness.login(validFor: 30)
        // Not before expiry plus leeway: 34 to 35 s from now (the token's exp is whole
        // seconds), less the real time the login took (seconds, on a loaded machine).
        await harness.loop.advanceTime(by: .seconds(20))
        #expect(harness.channel.isActive)
        try await harness.send(.heartbeat)
        _ = try await harness.next()
        await harness.loop.advanceTime(by: .seconds(16))
        let (_, kick) = try await harness.next()
        #expect(kick == .kick(Kick(reason: .tokenExpired, message: "the token expired; log in with a new one")))
        try await harness.closed()
        #expect(await Self.ended(session) == .tokenExpired)
    }

    @Test("TOKEN_REFRESH: LOGIN_OK names the expiry; a valid token moves the deadline, another user's is refused")
    func tokenRefresh() async throws {
        let harness = try await Harness.start { $0.auth.leeway = 0 }
        // (30 s of real time: a loaded machine must not let it expire while the test runs;
        // the test clock moves 60 s past it below.)
        let before = Date().timeIntervalSince1970
        let (okFrame, session) = try await harness.login(validFor: 30)
        let after = Date().timeIntervalSince1970
        guard case .loginOK(let ok) = try IMMessage(frame: okFrame) else { return }
        let expiry = Double(try #require(ok.tokenExpiry)) / 1000
        // The token was minted 30 s before it expires, during the login (exp is whole seconds).
        #expect(expiry >= before + 30 - 1 && expiry <= after + 30 + 1, "expiry \(expiry), login \(before)...\(after)")
        // Someone else's token: FORBIDDEN, the connection stays.
        let foreign = try await harness.minter.mint(user: "mallory", validFor: 3600)
        let refused = try await harness.send(.tokenRefresh(TokenRefresh(token: foreign)))
        let (_, nack) = try await harness.next()
        #expect(nack == .ack(Ack.refusing(sequence: refused, code: .forbidden, message: "the token is for user mallory, not alice")))
        // An expired token: TOKEN_EXPIRED.
        let stale = try await harness.minter.mint(user: "alice", validFor: 60, now: Date(timeIntervalSinceNow: -3600))
        let late = try await harness.send(.tokenRefresh(TokenRefresh(token: stale)))
        let (_, expired) = try await harness.next()
        guard case .ack(let expiredAck) = expired else { throw Failure("expected an ACK, got \(expired)") }
        #expect(expiredAck.sequence == late && expiredAck.error == .tokenExpired)
        // A good one: ACK with its expiry, and the old deadline no longer applies.
        let minted = Date().timeIntervalSince1970
        let fresh = try await harness.minter.mint(user: "alice", validFor: 3600)
        let accepted = try await harness.send(.tokenRefresh(TokenRefresh(token: fresh)))
        let (_, ack) = try await harness.next()
        guard case .ack(let refreshed) = ack else { throw Failure("expected an ACK, got \(ack)") }
        #expect(refreshed.sequence == accepted && refreshed.error == nil)
        // The new token's expiry (whole seconds), however long the machine took since.
        #expect(abs(Double(try #require(refreshed.tokenExpiry)) / 1000 - minted - 3600) < 2)
        await harness.loop.advanceTime(by: .seconds(60))
        #expect(harness.channel.isActive, "the refreshed token holds for an hour")
        _ = session
        try await harness.channel.close()
    }

    @Test("a login whose device dropped while it waited (here for the device's older connection to leave) opens no MQTT session: it would take over one the device opened elsewhere meanwhile")
    func droppedBeforeConnect() async throws {
        let harness = try await Harness.start()
        let (_, first) = try await harness.login()
        // The same device logs in again on a second connection: the login waits for the
        // first connection to leave, which waits for its MQTT session to end (held).
        first.holdEnds()
        let second = try await harness.anotherChannel()
        let token = try await harness.minter.mint(user: "alice")
        try await second.writeInbound(IMMessage.login(LoginRequest(token: token, deviceID: "phone")).frame(sequence: 1, timestamp: 1, sessionID: 5))
        let ending = await first.next { if case .end(let reason) = $0 { reason } else { nil } }
        #expect(ending == .takenOver)
        // The device drops the second connection; then the first connection's end returns.
        try await second.close()
        first.releaseEnds()
        // The login ends without a session (the registry forgets it).
        let deadline = ContinuousClock.now + .seconds(10)
        while await harness.context.registry.count > 0, ContinuousClock.now < deadline {
            await harness.loop.run()
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(await harness.context.registry.count == 0)
        #expect(harness.sessionsMade.current == 1, "a session was opened for a device that had gone")
    }

    @Test("a chat the broker takes after the device dropped is still recorded as accepted: its RESEND is not published again")
    func acceptedAfterDrop() async throws {
        let harness = try await Harness.start()
        let (_, session) = try await harness.login()
        session.holdOutcomes()
        let chat = ChatSend(to: "bob", messageID: "m-1", content: .text("on its way"))
        try await harness.send(.chat(chat))
        let published = await session.next { if case .chats(let chats) = $0 { chats.count } else { nil } }
        #expect(published == 1)
        // The device drops before the PUBACK; then the broker has it.
        try await harness.channel.close()
        session.releaseOutcomes()
        await harness.loop.run()
        let decision = harness.context.dedup.check(user: "alice", id: "m-1", fingerprint: ChatFingerprint(chat))
        guard case .duplicate = decision else {
            Issue.record("the accepted chat was not recorded (\(decision)): the device's RESEND would publish it twice")
            return
        }
    }

    @Test("silence: KICK IDLE_TIMEOUT after the idle timeout; a heartbeat pushes it back")
    func idle() async throws {
        let harness = try await Harness.start { $0.limits.idleTimeout = 90 }
        let (frame, session) = try await harness.login()
        guard case .loginOK(let ok) = try IMMessage(frame: frame) else { return }
        #expect(ok.heartbeatInterval == 30, "a third of the idle timeout")
        await harness.loop.advanceTime(by: .seconds(60))
        try await harness.send(.heartbeat)
        _ = try await harness.next()
        await harness.loop.advanceTime(by: .seconds(60))
        #expect(harness.channel.isActive)
        await harness.loop.advanceTime(by: .seconds(30))
        let (_, kick) = try await harness.next()
        #expect(kick == .kick(Kick(reason: .idleTimeout, message: "nothing received for 90 s")))
        try await harness.closed()
        #expect(await Self.ended(session) == .idleTimeout)
    }

    @Test("the MQTT connection lost: ERROR BROKER_UNAVAILABLE, close, the session ends")
    func brokerLost() async throws {
        let harness = try await Harness.start()
        let (_, session) = try await harness.login()
        session.lose(.error(code: 7, message: "The connection was lost."))
        let (_, message) = try await harness.next()
        guard case .error(let notice) = message else { throw Failure("expected ERROR, got \(message)") }
        #expect(notice.code == .brokerUnavailable)
        try await harness.closed()
        #expect(await Self.ended(session) == .brokerLost)
    }

    @Test("LOGOUT: ACK, close, the session ends as a logout")
    func logout() async throws {
        let harness = try await Harness.start()
        let (_, session) = try await harness.login()
        let sequence = try await harness.send(.logout(Logout()))
        let (frame, _) = try await harness.next()
        #expect(frame.header.type == .ack && frame.header.sequence == sequence)
        try await harness.closed()
        #expect(await Self.ended(session) == .logout)
    }

    @Test("a refused LOGIN: ERROR referring to it, close, no session opened")
    func refused() async throws {
        let harness = try await Harness.start()
        let sequence = try await harness.send(.login(LoginRequest(token: "not-a-jwt")), sessionID: 4)
        let (frame, message) = try await harness.next()
        guard case .error(let notice) = message else { throw Failure("expected ERROR, got \(message)") }
        #expect(notice.code == .authFailed && notice.refSequence == sequence)
        #expect(frame.header.sessionID == 4)
        try await harness.closed()
    }

    @Test("a LOGIN that cannot be decoded (a token over 8,192 bytes, no token) is a refused LOGIN: ERROR BAD_REQUEST referring to it, close at once")
    func malformedLogin() async throws {
        for request in [LoginRequest(token: String(repeating: "a", count: 8193)), LoginRequest(token: "")] {
            let harness = try await Harness.start { $0.limits.loginTimeout = 10 }
            let sequence = try await harness.send(.login(request), sessionID: 5)
            let (frame, message) = try await harness.next()
            guard case .error(let notice) = message else { throw Failure("expected ERROR, got \(message)") }
            #expect(notice.code == .badRequest && notice.refSequence == sequence)
            #expect(frame.header.sessionID == 5)
            // Closed without the login timeout passing (the test clock never moves).
            try await harness.closed()
        }
    }

    @Test("no LOGIN: ERROR LOGIN_TIMEOUT at the login timeout, with the last frame's session id")
    func loginTimeout() async throws {
        let harness = try await Harness.start { $0.limits.loginTimeout = 10 }
        try await harness.send(.heartbeat, sessionID: 6)
        _ = try await harness.next()
        await harness.loop.advanceTime(by: .seconds(10))
        let (frame, message) = try await harness.next()
        #expect(message == .error(ErrorNotice(code: .loginTimeout, message: "no login within 10 s")))
        #expect(frame.header.sessionID == 6)
        try await harness.closed()
    }
}

extension IMFrame {
    /// The SERVER_TIME of an ACK frame (it is the gateway's clock, not the test's).
    var ackServerTime: UInt64? {
        if case .ack(let ack) = try? IMMessage(frame: self) { return ack.serverTime }
        return nil
    }
}
