/// The client's connection lifecycle (seed 000, section 2.3): four states, explicit events,
/// and the actions each transition asks for. Decides only; ``IMClient`` does the I/O.
///
/// ```text
///   disconnected --connect / reconnectDue / networkAvailable--> connecting
///   connecting   --connectSucceeded--> connected
///   connecting   --connectFailed / connectionLost--> disconnected (+ scheduleReconnect)
///   connected    --connectionLost--> disconnected (+ scheduleReconnect)
///   connecting, connected --disconnect--> disconnecting --disconnectCompleted--> disconnected
/// ```
///
/// A terminal failure (a refused login, KICK SESSION_TAKEN_OVER) or a `disconnect` ends the
/// lifecycle: the machine is *finished* and ignores everything after it, so nothing reconnects
/// after logout or a kick. Events that do not fit the state (a late `connectSucceeded` after
/// the connection was dropped, a timer that fires while connected) are ignored: they return
/// no actions and change nothing.
struct ConnectionStateMachine: Sendable, Hashable {
    /// The four states of seed 000.
    enum State: Sendable, Hashable, CaseIterable {
        /// No connection; maybe waiting to reconnect (``ConnectionStateMachine/isReconnectScheduled``).
        case disconnected
        /// Opening TCP (and TLS), then waiting for LOGIN_OK.
        case connecting
        /// Logged in.
        case connected
        /// Closing at the application's request.
        case disconnecting
    }

    /// Whether a failure is worth reconnecting after.
    enum Failure: Sendable, Hashable, CaseIterable {
        /// The network or the gateway went away (reset, timeout, dead heartbeat, a restart):
        /// reconnect with backoff.
        case transient
        /// The gateway said not to come back (login refused, session taken over): stop.
        case terminal
    }

    /// What happened.
    enum Event: Sendable, Hashable {
        /// The application asks for a connection.
        case connect
        /// LOGIN_OK arrived.
        case connectSucceeded
        /// Opening the connection or logging in failed (or timed out).
        case connectFailed(Failure)
        /// The connection ended, or was declared dead (heartbeat, retransmits, KICK).
        case connectionLost(Failure)
        /// The backoff delay after ``Action/scheduleReconnect(attempt:)`` elapsed.
        case reconnectDue
        /// The application says the network is back: reconnect now if waiting to, else
        /// check the connection.
        case networkAvailable
        /// The application says the device moved to another network (another interface or
        /// address): a connection made over the old one is gone, so reconnect at once.
        case networkChanged
        /// The application closes or logs out.
        case disconnect
        /// The transport closed after ``disconnect``.
        case disconnectCompleted

        /// One of each, for exhaustive tests.
        static let allCases: [Event] = [
            .connect, .connectSucceeded, .connectFailed(.transient), .connectFailed(.terminal),
            .connectionLost(.transient), .connectionLost(.terminal), .reconnectDue, .networkAvailable,
            .networkChanged, .disconnect, .disconnectCompleted,
        ]
    }

    /// What the driver does, in the order returned.
    enum Action: Sendable, Hashable {
        /// Open a new connection and send LOGIN.
        case openConnection
        /// Close the current connection (if any).
        case closeConnection
        /// Logged in: start the heartbeat, restore watches and subscriptions, send the outbox.
        case loggedIn
        /// The logged-in connection is gone: requeue what is in flight, stop the heartbeat.
        case connectionDown
        /// Reconnect after the backoff delay of `attempt` (0 = the first level).
        case scheduleReconnect(attempt: Int)
        /// Forget a scheduled reconnect.
        case cancelReconnect
        /// Send a heartbeat now to check the connection (the network came back under it).
        case probeConnection
        /// Open a new connection now, without a backoff delay (the network changed).
        case reconnectNow
        /// The lifecycle is over: fail what waits, end the event stream.
        case finish
    }

    /// The current state.
    private(set) var state: State = .disconnected
    /// Failed attempts since the last successful login (the backoff level of the next one).
    private(set) var attempt = 0
    /// Whether a reconnect is scheduled (in ``State/disconnected``).
    private(set) var isReconnectScheduled = false
    /// Whether the lifecycle ended (``Action/finish`` was returned, or is due after the
    /// transport closes): no event changes anything any more.
    private(set) var isFinished = false

    /// The actions for `event`, after moving to the next state.
    mutating func handle(_ event: Event) -> [Action] {
        guard !isFinished else {
            // Finished: only the close that completes a disconnect still matters.
            if state == .disconnecting, event.endsTransport {
                state = .disconnected
                return [.connectionDown, .finish]
            }
            return []
        }
        switch (state, event) {
        case (.disconnected, .connect):
            let cancel: [Action] = isReconnectScheduled ? [.cancelReconnect] : []
            isReconnectScheduled = false
            state = .connecting
            return cancel + [.openConnection]
        case (.disconnected, .reconnectDue):
            guard isReconnectScheduled else { return [] }
            isReconnectScheduled = false
            state = .connecting
            return [.openConnection]
        case (.disconnected, .networkAvailable), (.disconnected, .networkChanged):
            guard isReconnectScheduled else { return [] }
            isReconnectScheduled = false
            state = .connecting
            return [.cancelReconnect, .openConnection]
        case (.disconnected, .disconnect):
            let cancel: [Action] = isReconnectScheduled ? [.cancelReconnect] : []
            isReconnectScheduled = false
            isFinished = true
            return cancel + [.finish]

        case (.connecting, .connectSucceeded):
            state = .connected
            attempt = 0
            return [.loggedIn]
        case (.connecting, .connectFailed(let failure)), (.connecting, .connectionLost(let failure)):
            state = .disconnected
            return [.closeConnection] + afterFailure(failure)
        case (.connecting, .disconnect):
            state = .disconnecting
            isFinished = true
            return [.closeConnection]
        case (.connecting, .networkChanged):
            // The attempt in progress went out over the old network: start again.
            return [.closeConnection, .reconnectNow]

        case (.connected, .connectionLost(let failure)):
            state = .disconnected
            return [.closeConnection, .connectionDown] + afterFailure(failure)
        case (.connected, .networkAvailable):
            return [.probeConnection]
        case (.connected, .networkChanged):
            state = .connecting
            return [.closeConnection, .connectionDown, .reconnectNow]
        case (.connected, .disconnect):
            state = .disconnecting
            isFinished = true
            return [.closeConnection]

        default:
            // Stale or out of place: a late answer from a connection already given up, a
            // timer racing a state change, a repeated request.
            return []
        }
    }

    /// After a failed attempt or a lost connection: back off and retry, or stop.
    private mutating func afterFailure(_ failure: Failure) -> [Action] {
        switch failure {
        case .transient:
            isReconnectScheduled = true
            defer { attempt += 1 }
            return [.scheduleReconnect(attempt: attempt)]
        case .terminal:
            isFinished = true
            return [.finish]
        }
    }
}

extension ConnectionStateMachine.Event {
    /// Whether the event means the transport is closed.
    var endsTransport: Bool {
        switch self {
        case .disconnectCompleted, .connectionLost, .connectFailed: true
        default: false
        }
    }
}
