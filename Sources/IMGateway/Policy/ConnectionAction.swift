import IMWire

/// What the connection must do after an event of its ``ConnectionStateMachine``.
public enum ConnectionAction: Sendable, Hashable {
    /// Nothing (the event does not matter in this state).
    case none
    /// ACK the HEARTBEAT (same sequence and session id).
    case answerHeartbeat
    /// Answer the HELLO with HELLO_OK.
    case answerHello
    /// Verify the LOGIN's token and open the device's MQTT session, then report
    /// `loginSucceeded` or `loginFailed`.
    case startLogin
    /// Send LOGIN_OK (referring to ``ConnectionStateMachine/loginHeader``) with what the
    /// login found, and start delivering.
    case completeLogin(LoginGrant)
    /// Pass the frame to the logged-in session.
    case handleFrame
    /// Refuse this request (a negative ACK with the code and text); stay open.
    case reject(IMErrorCode, String?)
    /// Write the farewell, then close the channel. The MQTT session is ended once the
    /// channel has closed (``endSession(_:)``).
    case close(Farewell)
    /// End the device's MQTT session the way the reason says, then report `sessionEnded`.
    case endSession(ConnectionStateMachine.CloseReason)
    /// The channel is closed and nothing is left open: the connection has finished.
    case finish
    /// A read held back by a pause after RATE_LIMITED happens now.
    case resumeReading

    /// The last frame of a connection the gateway closes.
    public enum Farewell: Sendable, Hashable {
        /// ERROR (not logged in, or the broker lost): with the LOGIN's REF_SEQUENCE when it
        /// answers a LOGIN.
        case error(IMErrorCode, String, refSequence: UInt32?)
        /// KICK with the reason code and text (logged in).
        case kick(IMErrorCode, String)
        /// The ACK of a LOGOUT.
        case acknowledgeLogout(IMFrameHeader)
    }
}
