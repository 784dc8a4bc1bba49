import IMWire
import NIOCore

extension ConnectionStateMachine {
    /// An event for the machine.
    public enum Event: Sendable, Hashable {
        /// A well-formed frame arrived at `now`.
        case frameReceived(FrameKind, IMFrameHeader, now: NIODeadline)
        /// The login flow verified the token (valid until `tokenDeadline`, leeway included)
        /// and opened the MQTT session; `grant` is what LOGIN_OK says.
        case loginSucceeded(tokenDeadline: NIODeadline, grant: LoginGrant = LoginGrant())
        /// The login flow failed with this code (AUTH_FAILED, TOKEN_EXPIRED, ...) and text,
        /// or could not open the MQTT session (BROKER_UNAVAILABLE).
        case loginFailed(IMErrorCode, String)
        /// A LOGIN arrived that cannot be decoded (a token over 8,192 bytes, a missing item):
        /// a refused LOGIN, answered with ERROR and closed like one.
        case loginMalformed(IMFrameHeader, IMErrorCode, String)
        /// A TOKEN_REFRESH was verified: the session now lasts until `tokenDeadline`.
        case tokenRefreshed(tokenDeadline: NIODeadline)
        /// The timer armed for ``ConnectionStateMachine/nextDeadline`` fired.
        case timerFired(now: NIODeadline)
        /// The same device logged in on another connection.
        case takenOver
        /// The app's backend ended the session (the server API's disconnect), for this reason.
        case disconnected(String)
        /// The gateway is shutting down.
        case shutdown
        /// The device's MQTT connection ended, for this reason.
        case brokerLost(String)
        /// The channel closed (by either side).
        case channelClosed
        /// Ending the MQTT session (``ConnectionAction/endSession(_:)``) has completed.
        case sessionEnded
    }

    /// Applies `event` and returns what to do.
    public mutating func handle(_ event: Event) -> ConnectionAction {
        switch self.state {
        case .awaitingLogin, .authenticating, .loggedIn:
            return self.handleOpen(event)
        case .closing(let reason, let session):
            return self.handleClosing(event, reason: reason, session: session, channelOpen: true)
        case .closed(let reason, let session):
            return self.handleClosing(event, reason: reason, session: session, channelOpen: false)
        case .finished:
            return .none
        }
    }

    private mutating func handleOpen(_ event: Event) -> ConnectionAction {
        switch event {
        case .frameReceived(let kind, let header, let now):
            self.lastHeard = now
            if self.loginHeader == nil { self.sessionID = header.sessionID }
            return self.frameReceived(kind, header)
        case .loginSucceeded(let tokenDeadline, let grant):
            guard self.state == .authenticating else { return .none }
            self.state = .loggedIn
            self.tokenDeadline = tokenDeadline
            self.downlink.wantsCarbons = grant.carbons
            return .completeLogin(grant)
        case .loginFailed(let code, let message):
            guard self.state == .authenticating else { return .none }
            self.state = .closing(.loginFailed, session: .none)
            // Refused LOGINs are answered like replies to it; a broker failure is the
            // gateway's own news.
            let refersToLogin = code != .brokerUnavailable
            return .close(.error(code, message, refSequence: refersToLogin ? self.loginHeader?.sequence : nil))
        case .loginMalformed(let header, let code, let message):
            guard self.state == .awaitingLogin else {
                return .reject(self.isLoggedIn ? .alreadyLoggedIn : code, message)
            }
            self.sessionID = header.sessionID
            self.state = .closing(.loginFailed, session: .none)
            return .close(.error(code, message, refSequence: header.sequence))
        case .tokenRefreshed(let tokenDeadline):
            guard self.isLoggedIn else { return .none }
            self.tokenDeadline = tokenDeadline
            return .none
        case .timerFired(let now):
            return self.timerFired(now)
        case .takenOver:
            if self.state == .awaitingLogin { return .none }
            return self.close(.takenOver, code: .sessionTakenOver, "logged in elsewhere")
        case .disconnected(let why):
            if self.state == .awaitingLogin { return .none }
            return self.close(.disconnected, code: .disconnected, why)
        case .shutdown:
            return self.close(.shutdown, code: .serverShuttingDown, "gateway shutting down")
        case .brokerLost(let why):
            guard self.isLoggedIn else { return .none }
            self.state = .closing(.brokerLost, session: .open)
            return .close(.error(.brokerUnavailable, why, refSequence: nil))
        case .channelClosed:
            return self.channelClosed(reason: .connectionLost, session: self.openSessionPhase)
        case .sessionEnded:
            return .none
        }
    }

    private mutating func frameReceived(_ kind: FrameKind, _ header: IMFrameHeader) -> ConnectionAction {
        switch kind {
        case .heartbeat:
            return .answerHeartbeat
        case .hello:
            guard !self.helloReceived else { return .reject(.badRequest, "HELLO was already answered") }
            self.helloReceived = true
            return .answerHello
        case .login:
            guard self.state == .awaitingLogin else { return .reject(.alreadyLoggedIn, nil) }
            self.state = .authenticating
            self.loginHeader = header
            self.sessionID = header.sessionID
            return .startLogin
        case .logout:
            guard self.isLoggedIn else { return .reject(.notLoggedIn, "log in first") }
            self.state = .closing(.logout, session: .open)
            return .close(.acknowledgeLogout(header))
        case .ack:
            return self.isLoggedIn ? .handleFrame : .none
        case .other:
            return self.isLoggedIn ? .handleFrame : .reject(.notLoggedIn, "log in first")
        }
    }

    /// The deadline that passed, if any: login first, then the token, silence, an
    /// unACKed delivery.
    private mutating func timerFired(_ now: NIODeadline) -> ConnectionAction {
        switch self.state {
        case .awaitingLogin, .authenticating:
            guard now >= self.loginDeadline else { return .none }
            return self.close(.loginTimeout, code: .loginTimeout, "no login within \(Self.seconds(self.limits.loginTimeout)) s")
        case .loggedIn:
            if let token = self.tokenDeadline, now >= token {
                return self.close(.tokenExpired, code: .tokenExpired, "the token expired; log in with a new one")
            }
            if now >= self.lastHeard + self.limits.idleTimeout {
                return self.close(.idleTimeout, code: .idleTimeout, "nothing received for \(Self.seconds(self.limits.idleTimeout)) s")
            }
            if let oldest = self.deliveries.oldest, now >= oldest + self.limits.deliveryAckTimeout {
                return self.close(.deliveryTimeout, code: .idleTimeout,
                    "delivery not acknowledged within \(Self.seconds(self.limits.deliveryAckTimeout)) s")
            }
            if self.reading.pauseEnded(now: now) { return .resumeReading }
            return .none
        case .closing, .closed, .finished:
            return .none
        }
    }

    /// Closes for `reason`: KICK when logged in, ERROR before.
    private mutating func close(_ reason: CloseReason, code: IMErrorCode, _ message: String) -> ConnectionAction {
        let loggedIn = self.isLoggedIn
        self.state = .closing(reason, session: self.openSessionPhase)
        return .close(loggedIn ? .kick(code, message) : .error(code, message, refSequence: nil))
    }

    /// The session's phase while the connection is still open.
    private var openSessionPhase: SessionPhase {
        switch self.state {
        case .awaitingLogin: .none
        case .authenticating: .opening
        case .loggedIn: .open
        case .closing(_, let session), .closed(_, let session): session
        case .finished: .none
        }
    }

    private mutating func handleClosing(_ event: Event, reason: CloseReason, session: SessionPhase, channelOpen: Bool) -> ConnectionAction {
        switch event {
        case .channelClosed:
            guard channelOpen else { return .none }
            return self.channelClosed(reason: reason, session: session)
        case .loginSucceeded:
            // The connection gave up while the login was opening the session: end it.
            guard session == .opening else { return .none }
            self.state = channelOpen ? .closing(reason, session: .ending) : .closed(reason, session: .ending)
            return .endSession(reason)
        case .loginFailed:
            guard session == .opening else { return .none }
            return self.sessionGone(reason: reason, channelOpen: channelOpen)
        case .sessionEnded:
            guard session == .ending else { return .none }
            return self.sessionGone(reason: reason, channelOpen: channelOpen)
        case .frameReceived, .loginMalformed, .tokenRefreshed, .timerFired, .takenOver, .disconnected, .shutdown, .brokerLost:
            return .none
        }
    }

    /// The channel has closed: end an open session, or finish if nothing is left.
    private mutating func channelClosed(reason: CloseReason, session: SessionPhase) -> ConnectionAction {
        switch session {
        case .none:
            self.state = .finished
            return .finish
        case .open:
            self.state = .closed(reason, session: .ending)
            return .endSession(reason)
        case .opening, .ending:
            self.state = .closed(reason, session: session)
            return .none
        }
    }

    private mutating func sessionGone(reason: CloseReason, channelOpen: Bool) -> ConnectionAction {
        if channelOpen {
            self.state = .closing(reason, session: .none)
            return .none
        }
        self.state = .finished
        return .finish
    }

    static func seconds(_ amount: TimeAmount) -> Int64 { amount.nanoseconds / 1_000_000_000 }
}
