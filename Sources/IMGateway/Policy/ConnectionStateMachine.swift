import IMWire

/// The life of one TLV connection as a pure state machine: the channel handler feeds it
/// events and performs the action it returns; the machine does no I/O and reads no clock.
///
/// ```text
/// awaitingLogin --login--> authenticating --loginSucceeded--> loggedIn
///       |                        |                               |
///       +--- timeouts, failures, logout, takeover, shutdown ---> closing --channelClosed--> closed
/// ```
///
/// HEARTBEAT is answered in every open state, HELLO at most once, requests other than LOGIN
/// are refused with NOT_LOGGED_IN until LOGIN_OK. When a connection that reached LOGIN_OK
/// closes, ``ConnectionAction/endSession(_:)`` says why, so the MQTT session is ended the right
/// way; a login that completes after the connection gave up is ended the same way.
public struct ConnectionStateMachine: Sendable, Hashable {
    /// Where the connection is.
    public enum State: Sendable, Hashable {
        /// Connected; LOGIN is due by `deadline` (seconds on the caller's clock).
        case awaitingLogin(deadline: Double)
        /// LOGIN received; the token and MQTT session are being set up.
        case authenticating
        /// LOGIN_OK sent: the device's session is live.
        case loggedIn
        /// The gateway decided to close, for this reason; waiting for the channel to close.
        case closing(CloseReason)
        /// The channel is closed.
        case closed
    }

    /// What a received frame is, as far as the connection's state is concerned.
    public enum FrameKind: Sendable, Hashable, CaseIterable {
        /// HEARTBEAT.
        case heartbeat
        /// HELLO.
        case hello
        /// LOGIN.
        case login
        /// LOGOUT.
        case logout
        /// ACK from the device (of a DELIVERY, PUBLISH or RECEIPT_NOTICE).
        case ack
        /// Any other request: CHAT, RECEIPT, PUBLISH, SUBSCRIBE, presence and location operations.
        case other
    }

    /// Why the gateway ends a connection.
    public enum CloseReason: Sendable, Hashable, CaseIterable {
        /// No LOGIN before the deadline.
        case loginTimeout
        /// The LOGIN was refused.
        case loginFailed
        /// Nothing was received for the idle timeout.
        case idleTimeout
        /// The token expired while logged in.
        case tokenExpired
        /// The client logged out: end the MQTT session for good (queued messages dropped).
        case logout
        /// The same device logged in elsewhere: leave the MQTT session to the new connection.
        case takenOver
        /// The gateway is shutting down: disconnect, keeping the MQTT session.
        case shutdown
        /// The peer closed or the connection broke: disconnect, keeping the MQTT session.
        case connectionLost
    }

    /// The current state.
    public internal(set) var state: State
    /// Whether a HELLO was answered (a second one is refused).
    public internal(set) var helloReceived = false
    /// A login flow was started and its result has not arrived yet.
    var loginPending = false
    /// LOGIN_OK was sent and the session has not been ended yet.
    var sessionOpen = false
    /// Why the connection is closing or closed.
    var closeReason: CloseReason? = nil

    /// A new connection whose LOGIN is due by `loginDeadline`.
    public init(loginDeadline: Double) {
        self.state = .awaitingLogin(deadline: loginDeadline)
    }

    /// When LOGIN is due, while it is.
    public var loginDeadline: Double? {
        if case .awaitingLogin(let deadline) = self.state { return deadline }
        return nil
    }
}
