import IMGateway
import IMWire
import NIOCore
import Testing

@Suite("ConnectionStateMachine")
struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine
    typealias Event = Machine.Event

    static let limits = Machine.Limits(
        loginTimeout: .seconds(10), idleTimeout: .seconds(90), deliveryAckTimeout: .seconds(30), tokenLeeway: .seconds(30))
    /// The clock at which every machine here is created.
    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)
    static func at(_ seconds: Int64) -> NIODeadline { start + .seconds(seconds) }
    static func header(sequence: UInt32 = 7, sessionID: UInt16 = 9) -> IMFrameHeader {
        IMFrameHeader(type: .control, sequence: sequence, timestamp: 0, sessionID: sessionID, bodyLength: 0, checksum: 0)
    }
    static func frame(_ kind: Machine.FrameKind, at seconds: Int64 = 1, sessionID: UInt16 = 9) -> Event {
        .frameReceived(kind, header(sessionID: sessionID), now: at(seconds))
    }

    /// A state to start from, reached from a fresh machine by `setup`.
    enum Start: String, CaseIterable, Sendable {
        case awaitingLogin, authenticating, loggedIn
        case closingLoginPending, closingSessionOpen, closingNothingOpen, closingSessionEnding
        case closedLoginPending, closedSessionEnding, finished

        var setup: [Event] {
            switch self {
            case .awaitingLogin: []
            case .authenticating: [frame(.login)]
            case .loggedIn: [frame(.login), .loginSucceeded(tokenDeadline: at(3600))]
            case .closingLoginPending: [frame(.login), .shutdown]
            case .closingSessionOpen: [frame(.login), .loginSucceeded(tokenDeadline: at(3600)), .takenOver]
            case .closingNothingOpen: [.timerFired(now: at(10))]
            case .closingSessionEnding: [frame(.login), .shutdown, .loginSucceeded(tokenDeadline: at(3600))]
            case .closedLoginPending: [frame(.login), .channelClosed]
            case .closedSessionEnding: [frame(.login), .loginSucceeded(tokenDeadline: at(3600)), .channelClosed]
            case .finished: [.channelClosed]
            }
        }

        func machine() -> Machine {
            var machine = Machine(limits: limits, now: start)
            for event in self.setup { _ = machine.handle(event) }
            return machine
        }
    }

    static let events: [Event] = [
        frame(.heartbeat), frame(.hello), frame(.login), frame(.logout), frame(.ack), frame(.other),
        .loginSucceeded(tokenDeadline: at(3600)), .loginFailed(.authFailed, "bad token"), .tokenRefreshed(tokenDeadline: at(7200)),
        .timerFired(now: at(5)), .takenOver, .shutdown, .brokerLost("gone"), .channelClosed, .sessionEnded,
        .loginMalformed(header(sequence: 8), .badRequest, "bad login"), .disconnected("by the app"),
    ]

    /// For each start, the action and the state after each of `events`, in order.
    static let expectations: [Start: [(ConnectionAction, Machine.State)]] = {
        let waiting = Machine.State.awaitingLogin
        let auth = Machine.State.authenticating
        let inside = Machine.State.loggedIn
        let login = header()
        func ignored(_ state: Machine.State) -> [(ConnectionAction, Machine.State)] {
            Array(repeating: (.none, state), count: events.count)
        }
        func with(_ state: Machine.State, _ changes: [Int: (ConnectionAction, Machine.State)]) -> [(ConnectionAction, Machine.State)] {
            var rows = ignored(state)
            for (index, row) in changes { rows[index] = row }
            return rows
        }
        return [
            .awaitingLogin: [
                (.answerHeartbeat, waiting), (.answerHello, waiting), (.startLogin, auth), (.reject(.notLoggedIn, "log in first"), waiting),
                (.none, waiting), (.reject(.notLoggedIn, "log in first"), waiting), (.none, waiting), (.none, waiting), (.none, waiting),
                (.none, waiting), (.none, waiting),
                (.close(.error(.serverShuttingDown, "gateway shutting down", refSequence: nil)), .closing(.shutdown, session: .none)),
                (.none, waiting), (.finish, .finished), (.none, waiting),
                (.close(.error(.badRequest, "bad login", refSequence: 8)), .closing(.loginFailed, session: .none)),
                (.none, waiting),
            ],
            .authenticating: [
                (.answerHeartbeat, auth), (.answerHello, auth), (.reject(.alreadyLoggedIn, nil), auth), (.reject(.notLoggedIn, "log in first"), auth),
                (.none, auth), (.reject(.notLoggedIn, "log in first"), auth), (.completeLogin(LoginGrant()), inside),
                (.close(.error(.authFailed, "bad token", refSequence: 7)), .closing(.loginFailed, session: .none)), (.none, auth),
                (.none, auth),
                (.close(.error(.sessionTakenOver, "logged in elsewhere", refSequence: nil)), .closing(.takenOver, session: .opening)),
                (.close(.error(.serverShuttingDown, "gateway shutting down", refSequence: nil)), .closing(.shutdown, session: .opening)),
                (.none, auth), (.none, .closed(.connectionLost, session: .opening)), (.none, auth),
                (.reject(.badRequest, "bad login"), auth),
                (.close(.error(.disconnected, "by the app", refSequence: nil)), .closing(.disconnected, session: .opening)),
            ],
            .loggedIn: [
                (.answerHeartbeat, inside), (.answerHello, inside), (.reject(.alreadyLoggedIn, nil), inside),
                (.close(.acknowledgeLogout(login)), .closing(.logout, session: .open)),
                (.handleFrame, inside), (.handleFrame, inside), (.none, inside), (.none, inside), (.none, inside), (.none, inside),
                (.close(.kick(.sessionTakenOver, "logged in elsewhere")), .closing(.takenOver, session: .open)),
                (.close(.kick(.serverShuttingDown, "gateway shutting down")), .closing(.shutdown, session: .open)),
                (.close(.error(.brokerUnavailable, "gone", refSequence: nil)), .closing(.brokerLost, session: .open)),
                (.endSession(.connectionLost), .closed(.connectionLost, session: .ending)), (.none, inside),
                (.reject(.alreadyLoggedIn, "bad login"), inside),
                (.close(.kick(.disconnected, "by the app")), .closing(.disconnected, session: .open)),
            ],
            .closingLoginPending: with(.closing(.shutdown, session: .opening), [
                6: (.endSession(.shutdown), .closing(.shutdown, session: .ending)),
                7: (.none, .closing(.shutdown, session: .none)),
                13: (.none, .closed(.shutdown, session: .opening)),
            ]),
            .closingSessionOpen: with(.closing(.takenOver, session: .open), [
                13: (.endSession(.takenOver), .closed(.takenOver, session: .ending)),
            ]),
            .closingNothingOpen: with(.closing(.loginTimeout, session: .none), [13: (.finish, .finished)]),
            .closingSessionEnding: with(.closing(.shutdown, session: .ending), [
                13: (.none, .closed(.shutdown, session: .ending)),
                14: (.none, .closing(.shutdown, session: .none)),
            ]),
            .closedLoginPending: with(.closed(.connectionLost, session: .opening), [
                6: (.endSession(.connectionLost), .closed(.connectionLost, session: .ending)),
                7: (.finish, .finished),
            ]),
            .closedSessionEnding: with(.closed(.connectionLost, session: .ending), [14: (.finish, .finished)]),
            .finished: ignored(.finished),
        ]
    }()

    struct Case: Sendable, CustomTestStringConvertible {
        let start: Start
        let eventIndex: Int
        var event: Event { ConnectionStateMachineTests.events[self.eventIndex] }
        var testDescription: String { "\(self.start) + \(self.event)" }
    }

    static let cases: [Case] = Start.allCases.flatMap { start in events.indices.map { Case(start: start, eventIndex: $0) } }

    @Test("every state and event", arguments: cases)
    func table(_ testCase: Case) throws {
        var machine = testCase.start.machine()
        let expected = try #require(Self.expectations[testCase.start]?[testCase.eventIndex])
        #expect(machine.handle(testCase.event) == expected.0)
        #expect(machine.state == expected.1)
    }

    @Test("the table covers every start and event")
    func tableIsComplete() {
        #expect(Self.cases.count == Start.allCases.count * Self.events.count)
        #expect(Start.allCases.allSatisfy { Self.expectations[$0]?.count == Self.events.count })
    }

    @Test("a second HELLO is refused, before and after login")
    func hello() {
        var machine = Machine(limits: Self.limits, now: Self.start)
        #expect(machine.handle(Self.frame(.hello)) == .answerHello)
        #expect(machine.helloReceived)
        #expect(machine.handle(Self.frame(.hello)) == .reject(.badRequest, "HELLO was already answered"))
        _ = machine.handle(Self.frame(.login))
        _ = machine.handle(.loginSucceeded(tokenDeadline: Self.at(3600)))
        #expect(machine.handle(Self.frame(.hello)) == .reject(.badRequest, "HELLO was already answered"))
    }

    @Test("the session id of what the gateway sends: the last frame's before LOGIN, the LOGIN's after")
    func sessionID() {
        var machine = Machine(limits: Self.limits, now: Self.start)
        #expect(machine.sessionID == 0)
        _ = machine.handle(Self.frame(.hello, sessionID: 3))
        #expect(machine.sessionID == 3)
        _ = machine.handle(Self.frame(.login, sessionID: 5))
        _ = machine.handle(Self.frame(.heartbeat, sessionID: 8))
        #expect(machine.sessionID == 5)
        #expect(machine.loginHeader?.sessionID == 5)
    }

    @Test("the login deadline applies until LOGIN_OK, also while the login runs")
    func loginDeadline() {
        var machine = Machine(limits: Self.limits, now: Self.start)
        #expect(machine.nextDeadline == Self.at(10))
        #expect(machine.handle(.timerFired(now: Self.at(9))) == .none)
        _ = machine.handle(Self.frame(.login, at: 9))
        #expect(machine.nextDeadline == Self.at(10))
        #expect(machine.handle(.timerFired(now: Self.at(10))) == .close(.error(.loginTimeout, "no login within 10 s", refSequence: nil)))
        #expect(machine.nextDeadline == nil)
        // The login that completes later is ended with the reason.
        #expect(machine.handle(.loginSucceeded(tokenDeadline: Self.at(3600))) == .endSession(.loginTimeout))
        #expect(machine.handle(.channelClosed) == .none)
        #expect(machine.handle(.sessionEnded) == .finish)
        #expect(machine.state == .finished)
    }

    @Test("idle: every frame pushes the deadline back; silence kicks with IDLE_TIMEOUT")
    func idle() {
        var machine = Start.loggedIn.machine()
        #expect(machine.nextDeadline == Self.at(91))
        _ = machine.handle(Self.frame(.heartbeat, at: 50))
        #expect(machine.handle(.timerFired(now: Self.at(91))) == .none)
        #expect(machine.nextDeadline == Self.at(140))
        #expect(machine.handle(.timerFired(now: Self.at(140))) == .close(.kick(.idleTimeout, "nothing received for 90 s")))
        #expect(machine.state == .closing(.idleTimeout, session: .open))
        #expect(machine.handle(.channelClosed) == .endSession(.idleTimeout))
    }

    @Test("token expiry kicks with TOKEN_EXPIRED unless the token was refreshed")
    func tokenExpiry() {
        var machine = Machine(limits: Self.limits, now: Self.start)
        _ = machine.handle(Self.frame(.login))
        _ = machine.handle(.loginSucceeded(tokenDeadline: Self.at(35)))
        #expect(machine.nextDeadline == Self.at(35))
        _ = machine.handle(Self.frame(.heartbeat, at: 34))
        #expect(machine.handle(.tokenRefreshed(tokenDeadline: Self.at(70))) == .none)
        #expect(machine.handle(.timerFired(now: Self.at(35))) == .none)
        #expect(machine.nextDeadline == Self.at(70))
        _ = machine.handle(Self.frame(.heartbeat, at: 69))
        #expect(machine.handle(.timerFired(now: Self.at(70))) == .close(.kick(.tokenExpired, "the token expired; log in with a new one")))
        #expect(machine.handle(.channelClosed) == .endSession(.tokenExpired))
        // A refresh that arrives after the decision changes nothing.
        #expect(machine.handle(.tokenRefreshed(tokenDeadline: Self.at(900))) == .none)
    }

    @Test("an unACKed delivery kicks with IDLE_TIMEOUT after the delivery ACK timeout; ACKed ones do not")
    func deliveryDeadline() {
        var machine = Start.loggedIn.machine()
        machine.deliveryWritten(1, deliveryID: 11, origin: nil, now: Self.at(2))
        machine.deliveryWritten(2, deliveryID: 12, origin: .init(from: "alice", messageID: "m"), now: Self.at(20))
        #expect(machine.nextDeadline == Self.at(32))
        let acked = machine.deliveryAcknowledged(1), again = machine.deliveryAcknowledged(1)
        #expect(acked?.deliveryID == 11)
        #expect(again == nil, "a second ACK of the same frame settles nothing")
        #expect(machine.nextDeadline == Self.at(50))
        _ = machine.handle(Self.frame(.ack, at: 45))
        #expect(machine.handle(.timerFired(now: Self.at(49))) == .none)
        #expect(machine.handle(.timerFired(now: Self.at(50))) == .close(.kick(.idleTimeout, "delivery not acknowledged within 30 s")))
        #expect(machine.state == .closing(.deliveryTimeout, session: .open))
    }

    @Test("out-of-order ACKs: the oldest unACKed delivery still sets the deadline")
    func outOfOrderAcks() {
        var deliveries = PendingDeliveries()
        for sequence in UInt32(1)...4 { deliveries.insert(sequence, deliveryID: UInt64(sequence), origin: nil, now: Self.at(Int64(sequence))) }
        let third = deliveries.remove(3), first = deliveries.remove(1)
        #expect(third?.deliveryID == 3 && first?.deliveryID == 1)
        #expect(deliveries.oldest == Self.at(2))
        let second = deliveries.remove(2)
        #expect(second != nil)
        #expect(deliveries.oldest == Self.at(4))
        #expect(deliveries.count == 1)
        let fourth = deliveries.remove(4)
        #expect(fourth != nil)
        #expect(deliveries.oldest == nil)
    }

    @Test("backpressure: reads wait while too many chats wait or the socket is full, and resume once")
    func backpressure() {
        var machine = Start.loggedIn.machine()
        var read = machine.readRequested()
        #expect(read)
        var resume = machine.backpressureChanged(waitingChats: ReadGate.maxWaitingChats)
        #expect(!resume)
        read = machine.readRequested()
        #expect(!read, "held: too many chats wait for the broker")
        resume = machine.backpressureChanged(waitingChats: 0, writable: false)
        #expect(!resume, "still held: the socket is full")
        resume = machine.backpressureChanged(writable: true)
        #expect(resume, "the held read happens now")
        resume = machine.backpressureChanged(writable: true)
        #expect(!resume, "once")
        read = machine.readRequested()
        #expect(read)
    }

    @Test("RATE_LIMITED: reading pauses until the given time, the deadline says so, and the timer's event resumes a held read once")
    func rateLimitPause() {
        var machine = Start.loggedIn.machine()
        let idle = machine.nextDeadline
        machine.rateLimited(until: Self.at(3))
        #expect(machine.nextDeadline == Self.at(3))
        let held = machine.readRequested()
        #expect(!held, "held: paused")
        machine.rateLimited(until: Self.at(2))
        #expect(machine.reading.pausedUntil == Self.at(3), "a shorter pause does not cut a longer one")
        let resumedEarly = machine.backpressureChanged(writable: true)
        #expect(!resumedEarly, "other backpressure does not end the pause")
        let early = machine.handle(.timerFired(now: Self.at(2)))
        #expect(early == .none)
        let due = machine.handle(.timerFired(now: Self.at(3)))
        #expect(due == .resumeReading)
        #expect(machine.nextDeadline == idle)
        let again = machine.handle(.timerFired(now: Self.at(4)))
        #expect(again == .none, "once")
        let open = machine.readRequested()
        #expect(open)
        // Without a held read the pause just ends.
        machine.rateLimited(until: Self.at(5))
        let ended = machine.handle(.timerFired(now: Self.at(5)))
        #expect(ended == .none)
        let openAgain = machine.readRequested()
        #expect(openAgain)
        // Before the login it means nothing.
        var fresh = Start.awaitingLogin.machine()
        fresh.rateLimited(until: Self.at(5))
        let freshRead = fresh.readRequested()
        #expect(freshRead)
    }

    @Test("a session is ended exactly once, with the reason the connection closed for")
    func sessionEndsOnce() {
        let endings: [(Event, Machine.CloseReason)] = [
            (Self.frame(.logout), .logout), (.timerFired(now: Self.at(200)), .idleTimeout), (.shutdown, .shutdown),
            (.takenOver, .takenOver), (.brokerLost("x"), .brokerLost), (.channelClosed, .connectionLost),
        ]
        for (event, reason) in endings {
            var machine = Start.loggedIn.machine()
            let first = machine.handle(event)
            let ended = first == .endSession(reason) ? first : machine.handle(.channelClosed)
            #expect(ended == .endSession(reason))
            #expect(machine.handle(.channelClosed) == .none)
            #expect(machine.handle(.loginSucceeded(tokenDeadline: Self.at(3600))) == .none)
            #expect(machine.handle(.sessionEnded) == .finish)
            #expect(machine.handle(.sessionEnded) == .none)
        }
    }
}
