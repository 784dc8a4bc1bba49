@testable import IMGateway
import IMWire
import Mosquitto
import NIOCore
import NIOEmbedded
import Testing

/// ``ConnectionStateMachine``'s course, without sockets, on a simulated clock: every state and
/// event, the deadlines, the session ended exactly once.
@Suite("ConnectionStateMachine")
struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine

    /// One input: a frame, mail, the timer after some time, or a channel event.
    enum Input: Sendable, CustomStringConvertible {
        case frame(IMMessage, sequence: UInt32)
        case mail(@Sendable (MachineHarness) -> ConnectionMailbox.Mail, String)
        case timer(after: Int64)
        case event(Machine.Event)
        /// A LOGIN whose items cannot be read.
        case malformedLogin

        var description: String {
            switch self {
            case .frame(let message, _): "frame \(message.body.map { type(of: $0).operation.description } ?? "\(message)")"
            case .mail(_, let name): "mail \(name)"
            case .timer(let seconds): "timer after \(seconds) s"
            case .event(let event): "\(event)"
            case .malformedLogin: "malformed LOGIN"
            }
        }

        func apply(to harness: inout MachineHarness) -> [ConnectionAction] {
            switch self {
            case .frame(let message, let sequence):
                return harness.send(message, sequence: sequence)
            case .mail(let make, _):
                return harness.mail(make(harness))
            case .timer(let seconds):
                return harness.advance(by: .seconds(seconds))
            case .event(let event):
                return harness.machine.handle(event)
            case .malformedLogin:
                var login = TLVWriter()
                login.write(.operation, integer: IMOperation.login.rawValue)
                return harness.machine.handle(.frame(IMFrame(type: .control, sequence: 8, timestamp: 0, sessionID: 9, body: login.buffer)))
            }
        }
    }

    static let login = Input.frame(.login(LoginRequest(token: "token", deviceID: "phone")), sequence: 7)
    static let opened = Input.mail({ $0.opened() }, "login opened")
    static let refused = Input.mail({ _ in .loginFinished(.refused(.authFailed, "bad token")) }, "login refused")
    static let takenOver = Input.mail({ _ in .leave(.takenOver, nil) }, "leave: taken over")
    static let disconnected = Input.mail({ _ in .leave(.disconnected("by the app"), nil) }, "leave: disconnected")
    static let lost = Input.mail({ .lost(.broker(.serverShuttingDown), session: ObjectIdentifier($0.session)) }, "session lost")
    static let ended = Input.mail({ _ in .sessionEnded }, "session ended")
    static let refreshed = Input.mail({ harness in
        .tokenVerified(.success(harness.clock.wallMilliseconds + 7_200_000), IMFrameHeader(type: .control, sequence: 6, timestamp: 0, sessionID: 9, bodyLength: 0, checksum: 0))
    }, "token verified")

    /// A state to start from, reached from a fresh machine by `setup`.
    enum Start: String, CaseIterable, Sendable {
        case awaitingLogin, authenticating, loggedIn
        case closingLoginPending, closingSessionOpen, closingNothingOpen, closingSessionEnding
        case closedLoginPending, closedSessionEnding, finished

        var setup: [Input] {
            switch self {
            case .awaitingLogin: []
            case .authenticating: [login]
            case .loggedIn: [login, opened]
            case .closingLoginPending: [login, .event(.shutdown)]
            case .closingSessionOpen: [login, opened, takenOver]
            case .closingNothingOpen: [.timer(after: 10)]
            case .closingSessionEnding: [login, .event(.shutdown), opened]
            case .closedLoginPending: [login, .event(.channelClosed)]
            case .closedSessionEnding: [login, opened, .event(.channelClosed)]
            case .finished: [.event(.channelClosed)]
            }
        }

        func harness() -> MachineHarness {
            var harness = MachineHarness()
            for input in setup { _ = input.apply(to: &harness) }
            return harness
        }
    }

    static let inputs: [Input] = [
        .frame(.heartbeat, sequence: 7), .frame(.hello(Hello(version: .current, features: [])), sequence: 7), login, .frame(.logout(Logout()), sequence: 7),
        .frame(.ack(Ack(sequence: 99)), sequence: 7), .frame(.presenceWatch(PresenceWatch(users: ["bob"])), sequence: 7),
        opened, refused, refreshed, .timer(after: 5), takenOver, .event(.shutdown), lost, .event(.channelClosed), ended, .malformedLogin,
        disconnected,
    ]

    /// For each start, what each of `inputs` does (its actions, timers and logs left out) and the
    /// state after it.
    static let expectations: [Start: [([String], Machine.State)]] = {
        let waiting = Machine.State.awaitingLogin
        let auth = Machine.State.authenticating
        let inside = Machine.State.loggedIn
        func ignored(_ state: Machine.State) -> [([String], Machine.State)] {
            Array(repeating: ([], state), count: inputs.count)
        }
        func with(_ state: Machine.State, _ changes: [Int: ([String], Machine.State)]) -> [([String], Machine.State)] {
            var rows = ignored(state)
            for (index, row) in changes { rows[index] = row }
            return rows
        }
        return [
            .awaitingLogin: with(waiting, [
                0: (["write ACK #7"], waiting), 1: (["answerHello #7"], waiting), 2: (["startLogin"], auth),
                3: (["write ACK #7 NOT_LOGGED_IN"], waiting), 5: (["write ACK #7 NOT_LOGGED_IN"], waiting),
                11: (["close ERROR SERVER_SHUTTING_DOWN"], .closing(.shutdown, session: .none)),
                13: (["finish"], .finished),
                15: (["close ERROR BAD_REQUEST ref=8"], .closing(.loginFailed, session: .none)),
            ]),
            .authenticating: with(auth, [
                0: (["write ACK #7"], auth), 1: (["answerHello #7"], auth), 2: (["write ACK #7 ALREADY_LOGGED_IN"], auth),
                3: (["write ACK #7 NOT_LOGGED_IN"], auth), 5: (["write ACK #7 NOT_LOGGED_IN"], auth),
                6: (["sessionOpened", "loggedIn alice/phone", "write LOGIN_OK"], inside),
                7: (["close ERROR AUTH_FAILED ref=7"], .closing(.loginFailed, session: .none)),
                10: (["abandonLogin takenOver", "close ERROR SESSION_TAKEN_OVER"], .closing(.takenOver, session: .opening)),
                11: (["abandonLogin shutdown", "close ERROR SERVER_SHUTTING_DOWN"], .closing(.shutdown, session: .opening)),
                13: (["abandonLogin connectionLost"], .closed(.connectionLost, session: .opening)),
                15: (["write ACK #8 BAD_REQUEST"], auth),
                16: (["abandonLogin disconnected", "close ERROR DISCONNECTED"], .closing(.disconnected, session: .opening)),
            ]),
            .loggedIn: with(inside, [
                0: (["write ACK #7"], inside), 1: (["answerHello #7"], inside), 2: (["write ACK #7 ALREADY_LOGGED_IN"], inside),
                3: (["close ACK #7"], .closing(.logout, session: .open)),
                5: (["request watch([\"bob\"]) #7"], inside),
                8: (["write ACK #6"], inside),
                10: (["close KICK SESSION_TAKEN_OVER"], .closing(.takenOver, session: .open)),
                11: (["close KICK SERVER_SHUTTING_DOWN"], .closing(.shutdown, session: .open)),
                12: (["close ERROR BROKER_UNAVAILABLE"], .closing(.brokerLost, session: .open)),
                13: (["endSession connectionLost"], .closed(.connectionLost, session: .ending)),
                15: (["write ACK #8 ALREADY_LOGGED_IN"], inside),
                16: (["close KICK DISCONNECTED"], .closing(.disconnected, session: .open)),
            ]),
            .closingLoginPending: with(.closing(.shutdown, session: .opening), [
                6: (["sessionOpened", "endSession shutdown"], .closing(.shutdown, session: .ending)),
                7: ([], .closing(.shutdown, session: .none)),
                13: ([], .closed(.shutdown, session: .opening)),
            ]),
            .closingSessionOpen: with(.closing(.takenOver, session: .open), [
                13: (["endSession takenOver"], .closed(.takenOver, session: .ending)),
            ]),
            .closingNothingOpen: with(.closing(.loginTimeout, session: .none), [13: (["finish"], .finished)]),
            .closingSessionEnding: with(.closing(.shutdown, session: .ending), [
                13: ([], .closed(.shutdown, session: .ending)),
                14: ([], .closing(.shutdown, session: .none)),
            ]),
            .closedLoginPending: with(.closed(.connectionLost, session: .opening), [
                6: (["sessionOpened", "endSession connectionLost"], .closed(.connectionLost, session: .ending)),
                7: (["finish"], .finished),
            ]),
            .closedSessionEnding: with(.closed(.connectionLost, session: .ending), [14: (["finish"], .finished)]),
            .finished: ignored(.finished),
        ]
    }()

    struct Case: Sendable, CustomTestStringConvertible {
        let start: Start
        let index: Int
        var testDescription: String { "\(start) + \(ConnectionStateMachineTests.inputs[index])" }
    }

    static let cases: [Case] = Start.allCases.flatMap { start in inputs.indices.map { Case(start: start, index: $0) } }

    @Test("every state and input", arguments: cases)
    func table(_ testCase: Case) throws {
        var harness = testCase.start.harness()
        let expected = try #require(Self.expectations[testCase.start]?[testCase.index])
        #expect(Self.inputs[testCase.index].apply(to: &harness).lines == expected.0)
        #expect(harness.machine.state == expected.1)
    }

    @Test("the table covers every start and input")
    func tableIsComplete() {
        #expect(Self.cases.count == Start.allCases.count * Self.inputs.count)
        #expect(Start.allCases.allSatisfy { Self.expectations[$0]?.count == Self.inputs.count })
    }

    @Test("a second HELLO is refused, before and after login; HELLO_OK takes the next sequence number")
    func hello() {
        var harness = MachineHarness()
        let first = harness.send(.hello(Hello(version: .current, features: [])))
        guard case .answerHello(_, let sequence, _)? = first.first(where: { if case .answerHello = $0 { true } else { false } }) else {
            Issue.record("no HELLO_OK: \(first.lines)")
            return
        }
        #expect(sequence == 1)
        #expect(harness.send(.hello(Hello(version: .current, features: [])), sequence: 5).lines == ["write ACK #5 BAD_REQUEST"])
        _ = harness.logIn()
        #expect(harness.send(.hello(Hello(version: .current, features: [])), sequence: 6).lines == ["write ACK #6 BAD_REQUEST"])
    }

    @Test("a HELLO with another major version is answered ERROR UNSUPPORTED_VERSION and closed (6.1); another minor is answered")
    func helloMajor() {
        var harness = MachineHarness()
        let refused = harness.send(.hello(Hello(version: IMProtocolVersion(major: 2, minor: 0), features: [])), sequence: 4)
        #expect(refused.lines == ["close ERROR UNSUPPORTED_VERSION ref=4"], "\(refused.lines)")
        var minor = MachineHarness()
        let answered = minor.send(.hello(Hello(version: IMProtocolVersion(major: 1, minor: 7), features: [])), sequence: 4)
        #expect(answered.contains { if case .answerHello = $0 { true } else { false } }, "\(answered.lines)")
    }

    @Test("the session id of what the gateway sends: the last frame's before LOGIN, the LOGIN's after")
    func sessionID() {
        var harness = MachineHarness()
        #expect(harness.machine.sessionID == 0)
        harness.send(.hello(Hello(version: .current, features: [])), sessionID: 3)
        #expect(harness.machine.sessionID == 3)
        harness.send(.login(LoginRequest(token: "t", deviceID: "phone")), sessionID: 5)
        harness.send(.heartbeat, sessionID: 8)
        #expect(harness.machine.sessionID == 5)
        let frames = harness.mail(harness.opened()).compactMap { action -> IMFrame? in if case .write(let frame) = action { frame } else { nil } }
        #expect(frames.first?.header.sessionID == 5, "LOGIN_OK in the LOGIN's session")
    }

    @Test("the login deadline applies until LOGIN_OK, also while the login runs; the timer is armed for it")
    func loginDeadline() {
        var harness = MachineHarness()
        #expect(harness.machine.nextDeadline == harness.clock.now + .seconds(10))
        #expect(harness.advance(by: .seconds(9)).lines == [])
        let login = harness.send(.login(LoginRequest(token: "t", deviceID: "phone")))
        guard case .startLogin(_, let within)? = login.first(where: { if case .startLogin = $0 { true } else { false } }) else {
            Issue.record("no login started: \(login.lines)")
            return
        }
        #expect(within == .seconds(1), "the login gets what is left of the connection's deadline")
        #expect(harness.advance(by: .seconds(1)).lines == ["abandonLogin loginTimeout", "close ERROR LOGIN_TIMEOUT"])
        #expect(harness.machine.nextDeadline == nil)
        // The login that completes later is ended with the reason.
        #expect(harness.mail(harness.opened()).lines == ["sessionOpened", "endSession loginTimeout"])
        #expect(harness.machine.handle(.channelClosed).lines == [])
        #expect(harness.mail(.sessionEnded).lines == ["finish"])
        #expect(harness.machine.state == .finished)
    }

    @Test("idle: every frame pushes the deadline back; silence kicks with IDLE_TIMEOUT")
    func idle() {
        var harness = MachineHarness()
        _ = harness.logIn()
        let start = harness.clock.now
        #expect(harness.machine.nextDeadline == start + .seconds(90))
        harness.clock.advance(by: .seconds(50))
        harness.send(.heartbeat)
        #expect(harness.advance(by: .seconds(40)).lines == [])
        #expect(harness.machine.nextDeadline == start + .seconds(140))
        #expect(harness.advance(by: .seconds(50)).lines == ["close KICK IDLE_TIMEOUT"])
        #expect(harness.machine.state == .closing(.idleTimeout, session: .open))
        #expect(harness.machine.handle(.channelClosed).lines == ["endSession idleTimeout"])
    }

    @Test("token expiry kicks with TOKEN_EXPIRED (leeway counted) unless the token was refreshed")
    func tokenExpiry() {
        var harness = MachineHarness()
        _ = harness.logIn(validFor: 5)
        #expect(harness.machine.nextDeadline == harness.clock.now + .seconds(35), "5 s, and 30 s of leeway")
        harness.clock.advance(by: .seconds(34))
        harness.send(.heartbeat)
        let refresh = harness.send(.tokenRefresh(TokenRefresh(token: "new")))
        #expect(refresh.lines == ["verifyToken #3"])
        #expect(harness.mail(.tokenVerified(.success(harness.clock.wallMilliseconds + 5_000), harness.frame(.heartbeat, sequence: 3).header)).lines == ["write ACK #3"])
        #expect(harness.advance(by: .seconds(1)).lines == [])
        #expect(harness.machine.nextDeadline == harness.clock.now + .seconds(34))
        harness.clock.advance(by: .seconds(33))
        harness.send(.heartbeat)
        #expect(harness.advance(by: .seconds(1)).lines == ["close KICK TOKEN_EXPIRED"])
        #expect(harness.machine.handle(.channelClosed).lines == ["endSession tokenExpired"])
        // A refresh that arrives after the decision changes nothing.
        #expect(harness.mail(.tokenVerified(.success(harness.clock.wallMilliseconds + 900_000), harness.frame(.heartbeat).header)).lines == [])
    }

    @Test("a refused TOKEN_REFRESH is answered with its code; the session goes on until the current token's deadline")
    func tokenRefused() {
        var harness = MachineHarness()
        _ = harness.logIn(validFor: 60)
        let deadline = harness.machine.nextDeadline
        let header = harness.frame(.heartbeat, sequence: 4).header
        #expect(harness.mail(.tokenVerified(.failure(LoginRefusal(code: .forbidden, message: "another user's")), header)).lines == ["write ACK #4 FORBIDDEN"])
        #expect(harness.machine.nextDeadline == deadline)
    }

    @Test("an unACKed delivery kicks with IDLE_TIMEOUT after the delivery ACK timeout; ACKed ones do not")
    func deliveryDeadline() {
        var harness = MachineHarness()
        _ = harness.logIn()
        let start = harness.clock.now
        harness.clock.advance(by: .seconds(2))
        let first = harness.mail(MachineHarness.chatMessage(from: "bob", to: "alice", id: "m-1", deliveryID: 11))
        #expect(first.lines == ["write DELIVERY m-1"])
        harness.clock.advance(by: .seconds(18))
        harness.mail(MachineHarness.chatMessage(from: "bob", to: "alice", id: "m-2", deliveryID: 12))
        #expect(harness.machine.nextDeadline == start + .seconds(32))
        // The gateway's frames are numbered 1 (LOGIN_OK), 2, 3.
        #expect(harness.send(.ack(Ack(sequence: 2))).lines == ["uplink acks=[11] receipts=[] probes=0"])
        #expect(harness.send(.ack(Ack(sequence: 2))).lines == [], "a second ACK of the same frame settles nothing")
        // Its "delivered" receipt waits for its window.
        #expect(harness.machine.nextDeadline == start + .seconds(20) + Uplink<PendingChat>.receiptWindow)
        #expect(harness.advance(by: Uplink<PendingChat>.receiptWindow).lines == ["uplink acks=[] receipts=[\"bob:m-1\"] probes=0"])
        #expect(harness.machine.nextDeadline == start + .seconds(50))
        harness.clock.advance(by: .seconds(25))
        harness.send(.heartbeat)
        #expect(harness.advance(by: .seconds(4)).lines == [])
        #expect(harness.advance(by: .seconds(1) - Uplink<PendingChat>.receiptWindow).lines == ["close KICK IDLE_TIMEOUT"])
        #expect(harness.machine.state == .closing(.deliveryTimeout, session: .open))
    }

    @Test("out-of-order ACKs: the oldest unACKed delivery still sets the deadline")
    func outOfOrderAcks() {
        let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
        func at(_ seconds: Int64) -> NIODeadline { start + .seconds(seconds) }
        var deliveries = PendingDeliveries()
        for sequence in UInt32(1)...4 { deliveries.insert(sequence, deliveryID: UInt64(sequence), origin: nil, now: at(Int64(sequence))) }
        let third = deliveries.remove(3), first = deliveries.remove(1)
        #expect(third?.deliveryID == 3 && first?.deliveryID == 1)
        #expect(deliveries.oldest == at(2))
        let second = deliveries.remove(2)
        #expect(second != nil)
        #expect(deliveries.oldest == at(4))
        #expect(deliveries.count == 1)
        let fourth = deliveries.remove(4)
        #expect(fourth != nil)
        #expect(deliveries.oldest == nil)
    }

    @Test("the socket full: nothing is written to the device, nor read from it; writable again, what waited goes and the held read happens, once")
    func writability() {
        var harness = MachineHarness()
        _ = harness.logIn()
        #expect(harness.machine.handle(.writabilityChanged(false)).lines == [])
        #expect(harness.mail(MachineHarness.chatMessage(from: "bob", to: "alice", id: "m-1", deliveryID: 1)).lines == [], "queued")
        #expect(harness.machine.handle(.readRequested).lines == [], "held")
        #expect(harness.machine.handle(.writabilityChanged(true)).lines == ["write DELIVERY m-1", "read"])
        #expect(harness.machine.handle(.writabilityChanged(true)).lines == [], "once")
        #expect(harness.machine.handle(.readRequested).lines == ["read"])
    }

    @Test("RATE_LIMITED: reading pauses until the given time, the timer is armed for it and resumes a held read once")
    func rateLimitPause() {
        var limits = MachineHarness.limits
        limits.chatRate = 1
        limits.chatBurst = 1
        var harness = MachineHarness(limits: limits)
        _ = harness.logIn()
        harness.send(.chat(ChatSend(to: "bob", messageID: "c-1", content: .text("1"))))
        let refused = harness.send(.chat(ChatSend(to: "bob", messageID: "c-2", content: .text("2"))))
        #expect(refused.lines == ["write ACK #3 RATE_LIMITED"])
        let armed = refused.compactMap { action -> NIODeadline? in if case .armTimer(let deadline) = action { deadline } else { nil } }
        #expect(armed == [harness.clock.now + .seconds(1)], "the timer is armed for the pause's end")
        #expect(harness.machine.handle(.readRequested).lines == [], "held: paused")
        #expect(harness.advance(by: .milliseconds(500)).lines == [])
        #expect(harness.advance(by: .milliseconds(500)).lines.contains("read"))
        #expect(harness.advance(by: .seconds(1)).lines == [], "once")
        #expect(harness.machine.handle(.readRequested).lines == ["read"])
        #expect(harness.statistics.chatRateLimited.load(ordering: .relaxed) == 1)
    }

    @Test("a session is ended exactly once, with the reason the connection closed for")
    func sessionEndsOnce() {
        let endings: [(Input, Machine.CloseReason)] = [
            (.frame(.logout(Logout()), sequence: 7), .logout), (.timer(after: 200), .idleTimeout), (.event(.shutdown), .shutdown),
            (Self.takenOver, .takenOver), (Self.lost, .brokerLost), (.event(.channelClosed), .connectionLost),
        ]
        for (input, reason) in endings {
            var harness = Start.loggedIn.harness()
            let first = input.apply(to: &harness).lines
            let ended = first.contains("endSession \(reason)") ? first : harness.machine.handle(.channelClosed).lines
            #expect(ended == ["endSession \(reason)"], "\(input)")
            #expect(harness.machine.handle(.channelClosed).lines == [])
            #expect(harness.mail(harness.opened()).lines.filter { $0.hasPrefix("endSession") } == [])
            #expect(harness.mail(.sessionEnded).lines == ["finish"])
            #expect(harness.mail(.sessionEnded).lines == [])
        }
    }

    @Test("a request to leave is answered once the connection has finished (the handler completes the promise)")
    func leavePromise() throws {
        let loop = EmbeddedEventLoop()
        var harness = Start.loggedIn.harness()
        let promise = loop.makePromise(of: Void.self)
        #expect(harness.mail(.leave(.takenOver, promise)).lines == ["whenFinished", "close KICK SESSION_TAKEN_OVER"])
        promise.succeed(())
        try loop.syncShutdownGracefully()
    }

    @Test("the loss of another session (an earlier try of the login) is not this connection's")
    func otherSessionLost() {
        var harness = Start.loggedIn.harness()
        let other = FakeDeviceSession(user: "alice", device: "phone", receiptNotices: true, topics: MachineHarness.topics)
        #expect(harness.mail(.lost(.broker(.serverShuttingDown), session: ObjectIdentifier(other))).lines == [])
        #expect(harness.machine.state == .loggedIn)
        #expect(harness.mail(.lost(.broker(.sessionTakenOver), session: ObjectIdentifier(harness.session))).lines == ["close KICK SESSION_TAKEN_OVER"])
    }

    @Test("a malformed frame: ERROR with the decoder's code, then close; the channel's end finishes it")
    func malformed() {
        var harness = MachineHarness()
        #expect(harness.machine.handle(.malformed(.badMagic(0x1234))).lines == ["close ERROR BAD_MAGIC"])
        #expect(harness.machine.handle(.channelClosed).lines == ["finish"])
    }
}
