import IMWire

extension ConnectionStateMachine {
    /// An event for the machine.
    public enum Event: Sendable, Hashable {
        /// A well-formed frame arrived.
        case frameReceived(FrameKind)
        /// The login flow verified the token and opened the MQTT session.
        case loginSucceeded
        /// The login flow failed with this code (AUTH_FAILED, TOKEN_EXPIRED, INVALID_USER_ID, ...).
        case loginFailed(IMErrorCode)
        /// No frame arrived for the idle timeout.
        case idleTimeout
        /// The login deadline passed.
        case loginTimeout
        /// The token's expiry passed while logged in.
        case tokenExpired
        /// The same device logged in on another connection.
        case takenOver
        /// The gateway is shutting down.
        case shutdown
        /// The channel closed (by either side).
        case channelClosed
    }

    /// Applies `event` and returns what to do.
    public mutating func handle(_ event: Event) -> ConnectionAction {
        switch self.state {
        case .awaitingLogin, .authenticating, .loggedIn:
            return self.handleOpen(event)
        case .closing(let reason):
            switch event {
            case .loginSucceeded, .loginFailed:
                return self.finishLateLogin(event, reason: reason)
            case .channelClosed:
                self.state = .closed
                return self.endSessionIfOpen(reason)
            default:
                return .none
            }
        case .closed:
            // Only a login still in flight matters: its session must not be left open.
            switch event {
            case .loginSucceeded, .loginFailed: return self.finishLateLogin(event, reason: self.closeReason ?? .connectionLost)
            default: return .none
            }
        }
    }

    private mutating func handleOpen(_ event: Event) -> ConnectionAction {
        let loggedIn = self.state == .loggedIn
        switch event {
        case .frameReceived(.heartbeat):
            return .answerHeartbeat
        case .frameReceived(.hello):
            guard !self.helloReceived else { return .reject(.badRequest) }
            self.helloReceived = true
            return .answerHello
        case .frameReceived(.login):
            guard case .awaitingLogin = self.state else { return .reject(.alreadyLoggedIn) }
            self.state = .authenticating
            self.loginPending = true
            return .startLogin
        case .frameReceived(.logout):
            guard loggedIn else { return .reject(.notLoggedIn) }
            self.enterClosing(.logout)
            return .acknowledgeAndClose
        case .frameReceived(.ack):
            return loggedIn ? .handleFrame : .none
        case .frameReceived(.other):
            return loggedIn ? .handleFrame : .reject(.notLoggedIn)
        case .loginSucceeded:
            guard self.state == .authenticating else { return .none }
            self.loginPending = false
            self.sessionOpen = true
            self.state = .loggedIn
            return .completeLogin
        case .loginFailed(let code):
            guard self.state == .authenticating else { return .none }
            self.loginPending = false
            self.enterClosing(.loginFailed)
            return .sendErrorAndClose(code)
        case .loginTimeout:
            guard case .awaitingLogin = self.state else { return .none }
            self.enterClosing(.loginTimeout)
            return .sendErrorAndClose(.loginTimeout)
        case .idleTimeout:
            return self.close(.idleTimeout, code: .idleTimeout)
        case .tokenExpired:
            guard loggedIn else { return .none }
            return self.close(.tokenExpired, code: .tokenExpired)
        case .takenOver:
            if case .awaitingLogin = self.state { return .none }
            return self.close(.takenOver, code: .sessionTakenOver)
        case .shutdown:
            return self.close(.shutdown, code: .serverShuttingDown)
        case .channelClosed:
            self.state = .closed
            self.closeReason = .connectionLost
            return self.endSessionIfOpen(.connectionLost)
        }
    }

    /// Closes for `reason`: KICK when logged in, ERROR before.
    private mutating func close(_ reason: CloseReason, code: IMErrorCode) -> ConnectionAction {
        let loggedIn = self.state == .loggedIn
        self.enterClosing(reason)
        return loggedIn ? .kickAndClose(code) : .sendErrorAndClose(code)
    }

    private mutating func enterClosing(_ reason: CloseReason) {
        self.state = .closing(reason)
        self.closeReason = reason
    }

    /// A login result that arrives after the connection was given up.
    private mutating func finishLateLogin(_ event: Event, reason: CloseReason) -> ConnectionAction {
        guard self.loginPending else { return .none }
        self.loginPending = false
        return event == .loginSucceeded ? .endSession(reason) : .none
    }

    private mutating func endSessionIfOpen(_ reason: CloseReason) -> ConnectionAction {
        guard self.sessionOpen else { return .none }
        self.sessionOpen = false
        return .endSession(reason)
    }
}
