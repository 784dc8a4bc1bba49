import IMGateway
import IMWire
import Testing

@Suite("ConnectionStateMachine")
struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine
    typealias Event = Machine.Event

    /// A state to start from, reached from a fresh machine by `setup`.
    enum Start: String, CaseIterable, Sendable {
        case awaitingLogin, authenticating, loggedIn
        case closingLoginPending, closingSessionOpen, closingNothingOpen
        case closed, closedLoginPending

        var setup: [Event] {
            switch self {
            case .awaitingLogin: []
            case .authenticating: [.frameReceived(.login)]
            case .loggedIn: [.frameReceived(.login), .loginSucceeded]
            case .closingLoginPending: [.frameReceived(.login), .shutdown]
            case .closingSessionOpen: [.frameReceived(.login), .loginSucceeded, .takenOver]
            case .closingNothingOpen: [.loginTimeout]
            case .closed: [.channelClosed]
            case .closedLoginPending: [.frameReceived(.login), .channelClosed]
            }
        }

        func machine() -> Machine {
            var machine = Machine(loginDeadline: 10)
            for event in self.setup { _ = machine.handle(event) }
            return machine
        }
    }

    static let events: [Event] = [
        .frameReceived(.heartbeat), .frameReceived(.hello), .frameReceived(.login), .frameReceived(.logout),
        .frameReceived(.ack), .frameReceived(.other), .loginSucceeded, .loginFailed(.authFailed), .idleTimeout,
        .loginTimeout, .tokenExpired, .takenOver, .shutdown, .channelClosed,
    ]

    /// For each start, the action and the state after each of `events`, in order.
    static let expectations: [Start: [(ConnectionAction, Machine.State)]] = {
        let waiting = Machine.State.awaitingLogin(deadline: 10)
        let auth = Machine.State.authenticating
        let inside = Machine.State.loggedIn
        func closing(_ reason: Machine.CloseReason) -> Machine.State { .closing(reason) }
        func ignored(_ state: Machine.State) -> [(ConnectionAction, Machine.State)] {
            Array(repeating: (.none, state), count: 13)
        }
        return [
            .awaitingLogin: [
                (.answerHeartbeat, waiting), (.answerHello, waiting), (.startLogin, auth), (.reject(.notLoggedIn), waiting),
                (.none, waiting), (.reject(.notLoggedIn), waiting), (.none, waiting), (.none, waiting),
                (.sendErrorAndClose(.idleTimeout), closing(.idleTimeout)), (.sendErrorAndClose(.loginTimeout), closing(.loginTimeout)),
                (.none, waiting), (.none, waiting), (.sendErrorAndClose(.serverShuttingDown), closing(.shutdown)), (.none, .closed),
            ],
            .authenticating: [
                (.answerHeartbeat, auth), (.answerHello, auth), (.reject(.alreadyLoggedIn), auth), (.reject(.notLoggedIn), auth),
                (.none, auth), (.reject(.notLoggedIn), auth), (.completeLogin, inside), (.sendErrorAndClose(.authFailed), closing(.loginFailed)),
                (.sendErrorAndClose(.idleTimeout), closing(.idleTimeout)), (.none, auth), (.none, auth),
                (.sendErrorAndClose(.sessionTakenOver), closing(.takenOver)), (.sendErrorAndClose(.serverShuttingDown), closing(.shutdown)),
                (.none, .closed),
            ],
            .loggedIn: [
                (.answerHeartbeat, inside), (.answerHello, inside), (.reject(.alreadyLoggedIn), inside), (.acknowledgeAndClose, closing(.logout)),
                (.handleFrame, inside), (.handleFrame, inside), (.none, inside), (.none, inside),
                (.kickAndClose(.idleTimeout), closing(.idleTimeout)), (.none, inside), (.kickAndClose(.tokenExpired), closing(.tokenExpired)),
                (.kickAndClose(.sessionTakenOver), closing(.takenOver)), (.kickAndClose(.serverShuttingDown), closing(.shutdown)),
                (.endSession(.connectionLost), .closed),
            ],
            .closingLoginPending: {
                var rows = ignored(closing(.shutdown)) + [(.none, .closed)]
                rows[6] = (.endSession(.shutdown), closing(.shutdown))
                return rows
            }(),
            .closingSessionOpen: ignored(closing(.takenOver)) + [(.endSession(.takenOver), .closed)],
            .closingNothingOpen: ignored(closing(.loginTimeout)) + [(.none, .closed)],
            .closed: ignored(.closed) + [(.none, .closed)],
            .closedLoginPending: {
                var rows = ignored(.closed) + [(.none, .closed)]
                rows[6] = (.endSession(.connectionLost), .closed)
                return rows
            }(),
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
        #expect(Self.cases.count == Start.allCases.count * 14)
        #expect(Start.allCases.allSatisfy { Self.expectations[$0]?.count == Self.events.count })
    }

    @Test("a second HELLO is refused; the deadline is readable while waiting")
    func hello() {
        var machine = Machine(loginDeadline: 42)
        #expect(machine.loginDeadline == 42)
        #expect(machine.handle(.frameReceived(.hello)) == .answerHello)
        #expect(machine.helloReceived)
        #expect(machine.handle(.frameReceived(.hello)) == .reject(.badRequest))
        _ = machine.handle(.frameReceived(.login))
        #expect(machine.loginDeadline == nil)
        _ = machine.handle(.loginSucceeded)
        #expect(machine.handle(.frameReceived(.hello)) == .reject(.badRequest))
    }

    @Test("a session is ended exactly once, with the reason the connection closed for")
    func sessionEndsOnce() {
        for (event, reason) in [(Event.frameReceived(.logout), Machine.CloseReason.logout), (.idleTimeout, .idleTimeout), (.shutdown, .shutdown), (.tokenExpired, .tokenExpired)] {
            var machine = Start.loggedIn.machine()
            _ = machine.handle(event)
            #expect(machine.handle(.channelClosed) == .endSession(reason))
            #expect(machine.handle(.channelClosed) == .none)
            #expect(machine.handle(.loginSucceeded) == .none)
        }
    }

    @Test("a login that completes after the connection gave up is ended with the reason")
    func lateLogin() {
        var machine = Machine(loginDeadline: 10)
        #expect(machine.handle(.frameReceived(.login)) == .startLogin)
        #expect(machine.handle(.idleTimeout) == .sendErrorAndClose(.idleTimeout))
        #expect(machine.handle(.channelClosed) == .none)
        #expect(machine.handle(.loginSucceeded) == .endSession(.idleTimeout))
        #expect(machine.handle(.loginSucceeded) == .none)

        var failed = Machine(loginDeadline: 10)
        _ = failed.handle(.frameReceived(.login))
        _ = failed.handle(.takenOver)
        #expect(failed.handle(.loginFailed(.authFailed)) == .none)
        #expect(failed.handle(.loginSucceeded) == .none)
    }
}
