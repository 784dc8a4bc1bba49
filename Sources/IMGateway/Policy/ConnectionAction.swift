import IMWire

/// What the connection must do after an event.
public enum ConnectionAction: Sendable, Hashable {
    /// Nothing (the event does not matter in this state).
    case none
    /// ACK the HEARTBEAT (same sequence and session id).
    case answerHeartbeat
    /// Answer the HELLO with HELLO_OK.
    case answerHello
    /// Verify the LOGIN's token and set up the device's MQTT session, then report
    /// `loginSucceeded` or `loginFailed`.
    case startLogin
    /// Send LOGIN_OK and start delivering.
    case completeLogin
    /// Pass the frame to the logged-in session.
    case handleFrame
    /// Refuse this request with the code (a negative ACK with that code); stay open.
    case reject(IMErrorCode)
    /// Send ERROR with the code, then close (not logged in).
    case sendErrorAndClose(IMErrorCode)
    /// Send KICK with the code, then close (logged in).
    case kickAndClose(IMErrorCode)
    /// ACK the LOGOUT, then close.
    case acknowledgeAndClose
    /// End the device's MQTT session as the reason says (see ``ConnectionStateMachine/CloseReason``).
    case endSession(ConnectionStateMachine.CloseReason)
}
