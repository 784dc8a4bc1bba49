import Testing

@testable import IMClient

/// Every state against every event (seed 000, section 2.3), plus the lifecycle rules:
/// backoff levels grow per failed attempt and reset on login, nothing reconnects after a
/// disconnect or a terminal failure.
@Suite("ConnectionStateMachine")
struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine
    typealias State = Machine.State
    typealias Event = Machine.Event
    typealias Action = Machine.Action

    /// A machine in `state`; `scheduled`: waiting to reconnect (disconnected only);
    /// `failures`: failed attempts so far.
    static func machine(in state: State, scheduled: Bool = false, failures: Int = 0) -> Machine {
        var machine = Machine()
        switch state {
        case .disconnected:
            if scheduled {
                _ = machine.handle(.connect)
                _ = machine.handle(.connectSucceeded)
                _ = machine.handle(.connectionLost(.transient))
                for _ in 0..<failures {
                    _ = machine.handle(.reconnectDue)
                    _ = machine.handle(.connectFailed(.transient))
                }
            }
        case .connecting:
            _ = machine.handle(.connect)
        case .connected:
            _ = machine.handle(.connect)
            _ = machine.handle(.connectSucceeded)
        case .disconnecting:
            _ = machine.handle(.connect)
            _ = machine.handle(.connectSucceeded)
            _ = machine.handle(.disconnect)
        }
        #expect(machine.state == state)
        #expect(machine.isReconnectScheduled == scheduled)
        return machine
    }

    /// The expected (next state, actions) for every pair, from a fresh lifecycle (not
    /// finished, no reconnect scheduled unless `scheduled`).
    static func expected(_ state: State, _ event: Event, scheduled: Bool) -> (State, [Action]) {
        switch (state, event) {
        case (.disconnected, .connect):
            return (.connecting, scheduled ? [.cancelReconnect, .openConnection] : [.openConnection])
        case (.disconnected, .reconnectDue):
            return scheduled ? (.connecting, [.openConnection]) : (.disconnected, [])
        case (.disconnected, .networkAvailable), (.disconnected, .networkChanged):
            return scheduled ? (.connecting, [.cancelReconnect, .openConnection]) : (.disconnected, [])
        case (.disconnected, .disconnect):
            return (.disconnected, scheduled ? [.cancelReconnect, .finish] : [.finish])
        case (.disconnected, _):
            return (.disconnected, [])

        case (.connecting, .connectSucceeded):
            return (.connected, [.loggedIn])
        case (.connecting, .connectFailed(.transient)), (.connecting, .connectionLost(.transient)):
            return (.disconnected, [.closeConnection, .scheduleReconnect(attempt: 0)])
        case (.connecting, .connectFailed(.terminal)), (.connecting, .connectionLost(.terminal)):
            return (.disconnected, [.closeConnection, .finish])
        case (.connecting, .disconnect):
            return (.disconnecting, [.closeConnection])
        case (.connecting, .networkChanged):
            return (.connecting, [.closeConnection, .reconnectNow])
        case (.connecting, _):
            return (.connecting, [])

        case (.connected, .connectionLost(.transient)):
            return (.disconnected, [.closeConnection, .connectionDown, .scheduleReconnect(attempt: 0)])
        case (.connected, .connectionLost(.terminal)):
            return (.disconnected, [.closeConnection, .connectionDown, .finish])
        case (.connected, .networkAvailable):
            return (.connected, [.probeConnection])
        case (.connected, .networkChanged):
            return (.connecting, [.closeConnection, .connectionDown, .reconnectNow])
        case (.connected, .disconnect):
            return (.disconnecting, [.closeConnection])
        case (.connected, _):
            return (.connected, [])

        case (.disconnecting, .disconnectCompleted), (.disconnecting, .connectionLost), (.disconnecting, .connectFailed):
            return (.disconnected, [.connectionDown, .finish])
        case (.disconnecting, _):
            return (.disconnecting, [])
        }
    }

    @Test("every state and event, not waiting to reconnect", arguments: State.allCases, Event.allCases)
    func everyPair(state: State, event: Event) {
        var machine = Self.machine(in: state)
        let (next, actions) = Self.expected(state, event, scheduled: false)
        #expect(machine.handle(event) == actions)
        #expect(machine.state == next)
    }

    @Test("every event while waiting to reconnect", arguments: Event.allCases)
    func everyEventWhileScheduled(event: Event) {
        var machine = Self.machine(in: .disconnected, scheduled: true)
        let (next, actions) = Self.expected(.disconnected, event, scheduled: true)
        #expect(machine.handle(event) == actions)
        #expect(machine.state == next)
    }

    @Test("finished after a disconnect or a terminal failure: every event is ignored", arguments: Event.allCases)
    func finishedIgnoresEverything(event: Event) {
        let endings: [[Event]] = [
            [.connect, .connectFailed(.terminal)],
            [.connect, .connectSucceeded, .connectionLost(.terminal)],
            [.connect, .connectSucceeded, .disconnect, .disconnectCompleted],
            [.disconnect],
        ]
        for ending in endings {
            var machine = Machine()
            for step in ending { _ = machine.handle(step) }
            #expect(machine.isFinished)
            #expect(machine.state == .disconnected)
            #expect(machine.handle(event) == [], "after \(ending), \(event) must do nothing")
            #expect(machine.state == .disconnected)
            #expect(!machine.isReconnectScheduled)
        }
    }

    @Test("backoff attempts count failed reconnects and reset on login")
    func attempts() {
        var machine = Machine()
        _ = machine.handle(.connect)
        _ = machine.handle(.connectSucceeded)
        #expect(machine.handle(.connectionLost(.transient)).last == .scheduleReconnect(attempt: 0))
        for expected in 1...6 {
            #expect(machine.handle(.reconnectDue) == [.openConnection])
            #expect(machine.handle(.connectFailed(.transient)) == [.closeConnection, .scheduleReconnect(attempt: expected)])
        }
        #expect(machine.handle(.networkAvailable) == [.cancelReconnect, .openConnection], "network back: at once")
        #expect(machine.handle(.connectSucceeded) == [.loggedIn])
        #expect(machine.attempt == 0)
        #expect(machine.handle(.connectionLost(.transient)).last == .scheduleReconnect(attempt: 0), "reset after a login")
    }

    @Test("a disconnect while connecting waits for the transport, then finishes once")
    func disconnectWhileConnecting() {
        var machine = Machine()
        _ = machine.handle(.connect)
        #expect(machine.handle(.disconnect) == [.closeConnection])
        #expect(machine.handle(.connectSucceeded) == [], "a late LOGIN_OK does not revive it")
        #expect(machine.state == .disconnecting)
        #expect(machine.handle(.disconnectCompleted) == [.connectionDown, .finish])
        #expect(machine.handle(.disconnectCompleted) == [])
    }

    @Test("a disconnect while waiting to reconnect cancels the timer; the timer firing later does nothing")
    func disconnectWhileWaiting() {
        var machine = Self.machine(in: .disconnected, scheduled: true, failures: 2)
        #expect(machine.attempt == 3)
        #expect(machine.handle(.disconnect) == [.cancelReconnect, .finish])
        #expect(machine.handle(.reconnectDue) == [])
        #expect(machine.handle(.networkAvailable) == [])
    }
}
