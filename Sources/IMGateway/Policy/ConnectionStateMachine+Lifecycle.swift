import IMWire
import NIOCore

/// The connection's course: frames before and around the login, the login's outcome, leaving
/// (LOGOUT, deadlines, takeover, the backend, shutdown, the broker), the channel closing and
/// the session ending.
extension ConnectionStateMachine {
    /// Why a connection is told to leave from outside (``SessionRegistry``).
    enum LeaveReason: Sendable, Hashable {
        /// The same device logged in on another connection.
        case takenOver
        /// The app's backend ended the session (the server API's disconnect), for this reason.
        case disconnected(String)
    }

    private var isOpen: Bool {
        switch state {
        case .awaitingLogin, .authenticating, .loggedIn: true
        case .closing, .closed, .finished: false
        }
    }

    // MARK: Frames

    /// A frame arrived: its body is read, then it is answered, or starts the login, or goes to
    /// the logged-in session.
    mutating func frameReceived(_ frame: IMFrame) {
        let header = frame.header
        let message: IMMessage
        switch Result(catching: { () throws(IMWireError) -> IMMessage in try IMMessage(frame: frame) }) {
        case .success(let decoded):
            message = decoded
        case .failure(let error):
            if error.isFatal { return malformed(error) }
            if IMMessage.operation(of: frame) == .login { return loginMalformed(header, error.errorCode, "\(error)") }
            // Well framed, not a valid message: refuse it, stay open.
            return refuse(header, error.errorCode, "\(error)")
        }
        guard isOpen else { return }
        lastHeard = clock.now
        if login == nil { sessionID = header.sessionID }
        switch message {
        case .heartbeat:
            if let answer = IMFrame.heartbeatReply(to: frame, timestamp: clock.unixSeconds) { emit(.write(answer)) }
        case .hello(let hello):
            guard !helloReceived else { return refuse(header, .badRequest, "HELLO was already answered") }
            guard hello.version.major == IMProtocolVersion.current.major else {
                // Another major version speaks another protocol: say so, then close (6.1).
                let error = IMWireError.unsupportedVersion(major: hello.version.major, minor: hello.version.minor)
                log(.notice, "closing: HELLO with another major version", ["error": "\(error)"])
                return emit(.close(farewell: error.errorFrame(
                    sequence: nextSequence(), timestamp: clock.unixSeconds, sessionID: header.sessionID, inReplyTo: header.sequence)))
            }
            helloReceived = true
            emit(.answerHello(header, sequence: nextSequence(), timestamp: clock.unixSeconds))
        case .login(let request):
            guard state == .awaitingLogin else { return refuse(header, .alreadyLoggedIn, nil) }
            state = .authenticating
            login = (header, request)
            sessionID = header.sessionID
            emit(.startLogin(request, within: loginDeadline - clock.now))
        case .logout:
            guard isLoggedIn else { return refuse(header, .notLoggedIn, "log in first") }
            state = .closing(.logout, session: .open)
            emit(.close(farewell: Ack(sequence: header.sequence).frame(timestamp: clock.unixSeconds, sessionID: header.sessionID)))
        case .ack(let ack):
            if isLoggedIn { acknowledged(ack.sequence) }
        default:
            guard isLoggedIn else { return refuse(header, .notLoggedIn, "log in first") }
            request(message, header)
        }
    }

    /// The stream is no longer framed: say why, then close (the channel's end finishes it).
    mutating func malformed(_ error: IMWireError) {
        log(.notice, "closing on a malformed frame", ["error": "\(error)"])
        emit(.close(farewell: error.errorFrame(sequence: nextSequence(), timestamp: clock.unixSeconds)))
    }

    /// A LOGIN that cannot be decoded (a token over 8,192 bytes, a missing item): a refused
    /// LOGIN, answered with ERROR and closed like one.
    private mutating func loginMalformed(_ header: IMFrameHeader, _ code: IMErrorCode, _ message: String) {
        guard state == .awaitingLogin else {
            guard isOpen else { return }
            return refuse(header, isLoggedIn ? .alreadyLoggedIn : code, message)
        }
        sessionID = header.sessionID
        state = .closing(.loginFailed, session: .none)
        farewell(error: code, message, refSequence: header.sequence, sessionID: header.sessionID)
    }

    // MARK: The login

    /// What the login task came to.
    mutating func loginFinished(_ outcome: LoginOutcome) {
        switch outcome {
        case .opened(let opened):
            switch state {
            case .authenticating:
                emit(.sessionOpened(opened))
                completeLogin(opened)
            case .closing(let reason, session: .opening):
                // The connection gave up while the login was opening the session: end it.
                state = .closing(reason, session: .ending)
                emit(.sessionOpened(opened))
                emit(.endSession(reason))
            case .closed(let reason, session: .opening):
                state = .closed(reason, session: .ending)
                emit(.sessionOpened(opened))
                emit(.endSession(reason))
            default:
                // No login waits for it (it cannot happen: a connection has one login).
                return
            }
        case .refused(let code, let message):
            log(.notice, "login refused", ["error": "\(message)"])
            loginFailed(code, message)
        case .brokerFailed(let message):
            loginFailed(.brokerUnavailable, message)
        }
    }

    /// The login failed with this code (AUTH_FAILED, TOKEN_EXPIRED, ...) and text, or could not
    /// open the MQTT session (BROKER_UNAVAILABLE).
    private mutating func loginFailed(_ code: IMErrorCode, _ message: String) {
        switch state {
        case .authenticating:
            state = .closing(.loginFailed, session: .none)
            // Refused LOGINs are answered like replies to it; a broker failure is the
            // gateway's own news.
            let refersToLogin = code != .brokerUnavailable
            farewell(error: code, message, refSequence: refersToLogin ? login?.header.sequence : nil, sessionID: nil)
        case .closing(let reason, session: .opening):
            sessionGone(reason, channelOpen: true)
        case .closed(let reason, session: .opening):
            sessionGone(reason, channelOpen: false)
        default:
            return
        }
    }

    /// LOGIN_OK, then deliveries flow: the archive's catch-up first, then the mail that came
    /// during the login.
    private mutating func completeLogin(_ opened: OpenedSession) {
        guard let login else { return }
        state = .loggedIn
        tokenDeadline = deadline(ofTokenExpiringAt: opened.expiresAt)
        let session = LoggedIn(
            session: opened.session, brokerFit: opened.brokerFit, carbons: login.request.carbons ?? true, limits: limits)
        self.session = session
        emit(.loggedIn(user: session.user, device: session.device, resumed: opened.resumed))
        let position = opened.sync.flatMap { sync in
            sync.last.flatMap { _ in limits.archiveEpoch.map { StreamPosition(epoch: $0, offset: sync.position) } }
        }
        send(.loginOK(LoginOK(
            userID: session.user, deviceID: session.device, serverTime: clock.wallMilliseconds,
            heartbeatInterval: limits.heartbeatInterval, tokenExpiry: opened.expiresAt, refSequence: login.header.sequence,
            sessionResumed: opened.resumed, position: position, syncStatus: opened.sync?.status)))
        log(.info, "logged in")
        // The catch-up starts before the mail that came early: the broker's messages wait for it.
        openArchive(opened.sync, asked: login.request.position)
        let early = self.early
        self.early = []
        for mail in early { mailItem(mail) }
    }

    /// When a token that expires at `expiresAt` (Unix ms) stops being accepted (the leeway
    /// included), on the connection's clock.
    func deadline(ofTokenExpiringAt expiresAt: UInt64) -> NIODeadline {
        let left = (Int64(clamping: expiresAt) - Int64(clamping: clock.wallMilliseconds)) * 1_000_000 + limits.tokenLeeway.nanoseconds
        return clock.now + .nanoseconds(max(0, min(left, 1_000_000_000 * 1_000_000_000)))
    }

    // MARK: Leaving

    /// Told to leave from outside: a newer login of the device, the backend's disconnect, or
    /// shutdown (KICK, or ERROR before LOGIN_OK; then the channel closes and the session ends).
    mutating func leave(_ reason: LeaveReason?) {
        guard isOpen else { return }
        switch reason {
        case .takenOver?:
            guard state != .awaitingLogin else { return }
            close(.takenOver, code: .sessionTakenOver, "logged in elsewhere")
        case .disconnected(let why)?:
            guard state != .awaitingLogin else { return }
            close(.disconnected, code: .disconnected, why)
        case nil:
            close(.shutdown, code: .serverShuttingDown, "gateway shutting down")
        }
    }

    /// The device's MQTT connection ended, for this reason: the device is told, and reconnects.
    mutating func brokerLost(_ why: String) {
        guard isLoggedIn else { return }
        state = .closing(.brokerLost, session: .open)
        farewell(error: .brokerUnavailable, why, refSequence: nil, sessionID: nil)
    }

    /// Closes for `reason`: KICK when logged in, ERROR before.
    mutating func close(_ reason: CloseReason, code: IMErrorCode, _ message: String) {
        let loggedIn = isLoggedIn
        let phase = openSessionPhase
        state = .closing(reason, session: phase)
        if phase == .opening { emit(.abandonLogin(reason)) }
        if loggedIn {
            log(.info, "kicked", ["code": "\(code)", "reason": "\(message)"])
            emit(.close(farewell: IMMessage.kick(Kick(reason: code, message: message))
                .frame(sequence: nextSequence(), timestamp: clock.unixSeconds, sessionID: sessionID)))
        } else {
            farewell(error: code, message, refSequence: nil, sessionID: nil)
        }
    }

    /// ERROR as the last frame (with the LOGIN's REF_SEQUENCE and session id when it answers
    /// the LOGIN), then close.
    private mutating func farewell(error code: IMErrorCode, _ message: String, refSequence: UInt32?, sessionID: UInt16?) {
        log(.info, "closing", ["code": "\(code)", "reason": "\(message)"])
        let id = sessionID ?? (refSequence != nil ? login?.header.sessionID ?? self.sessionID : self.sessionID)
        emit(.close(farewell: IMMessage.error(ErrorNotice(code: code, message: message, refSequence: refSequence))
            .frame(sequence: nextSequence(), timestamp: clock.unixSeconds, sessionID: id)))
    }

    /// The session's phase while the connection is still open.
    private var openSessionPhase: SessionPhase {
        switch state {
        case .awaitingLogin: .none
        case .authenticating: .opening
        case .loggedIn: .open
        case .closing(_, let session), .closed(_, let session): session
        case .finished: .none
        }
    }

    // MARK: Ending

    /// The channel has closed: end an open session, or finish if nothing is left.
    mutating func channelClosed() {
        switch state {
        case .awaitingLogin, .authenticating, .loggedIn:
            let phase = openSessionPhase
            if phase == .opening { emit(.abandonLogin(.connectionLost)) }
            channelClosed(reason: .connectionLost, session: phase)
        case .closing(let reason, let session):
            channelClosed(reason: reason, session: session)
        case .closed, .finished:
            return
        }
    }

    private mutating func channelClosed(reason: CloseReason, session: SessionPhase) {
        switch session {
        case .none:
            finish()
        case .open:
            state = .closed(reason, session: .ending)
            endSession(reason)
        case .opening, .ending:
            state = .closed(reason, session: session)
        }
    }

    /// Starts ending the device's MQTT session: what the device ACKed goes first
    /// (acknowledgements, "delivered" receipts), the chats it sent are handed over, its
    /// position is saved.
    private mutating func endSession(_ reason: CloseReason) {
        closeArchive()
        flushUplink(ending: true)
        emit(.endSession(reason))
    }

    /// Ending the MQTT session has completed.
    mutating func sessionEnded() {
        switch state {
        case .closing(let reason, session: .ending):
            sessionGone(reason, channelOpen: true)
        case .closed(let reason, session: .ending):
            sessionGone(reason, channelOpen: false)
        default:
            return
        }
    }

    private mutating func sessionGone(_ reason: CloseReason, channelOpen: Bool) {
        session = nil
        if channelOpen {
            state = .closing(reason, session: .none)
        } else {
            finish()
        }
    }

    private mutating func finish() {
        state = .finished
        session = nil
        early = []
        emit(.finish)
    }
}
