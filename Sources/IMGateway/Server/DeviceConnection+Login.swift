import AsyncToolkit
import Foundation
import IMArchive
import IMWire
import Logging
import Mosquitto
import NIOCore

extension DeviceConnection {
    /// How a login ended.
    enum LoginOutcome: Sendable {
        /// The token holds until `expiresAt` and the MQTT session is open (`resumed`: the
        /// broker kept it); with the archive, `sync` says where the device's catch-up starts
        /// (`nil` when the archive could not be read), `asked` is the position LOGIN gave.
        case opened(
            any DeviceSession, registration: UInt64, resumed: Bool, expiresAt: Date, brokerFit: BrokerFit,
            sync: LoginSync?, asked: StreamPosition?)
        /// Refused: ERROR with this code, then close.
        case refused(IMErrorCode, String)
        /// The MQTT session could not be opened (the session was ended again).
        case brokerFailed(String)
    }

    /// Verifies the token and opens the device's MQTT session, on a task of its own; the
    /// outcome comes back to the event loop as ``loginFinished(_:)``.
    func startLogin(_ request: LoginRequest) {
        guard let loop = output?.context.eventLoop, let mailbox else { return }
        Self.spawnLogin(request, gateway: gateway, mailbox: mailbox, logger: logger.logger, connection: NIOLoopBound(self, eventLoop: loop))
    }

    private static func spawnLogin(
        _ request: LoginRequest, gateway: GatewayContext, mailbox: ConnectionMailbox, logger: Logger,
        connection: NIOLoopBound<DeviceConnection>
    ) {
        Task { await login(request, gateway: gateway, mailbox: mailbox, logger: logger, connection: connection) }
    }

    private static func login(
        _ request: LoginRequest, gateway: GatewayContext, mailbox: ConnectionMailbox, logger: Logger,
        connection: NIOLoopBound<DeviceConnection>
    ) async {
        let loop = connection.eventLoop
        let outcome = await login(request, gateway: gateway, mailbox: mailbox, logger: logger) { event in
            // A newer login of this device, or the backend's disconnect.
            try? await loop.flatSubmit { connection.value.leave(event) }.get()
        }
        loop.execute { connection.value.loginFinished(outcome, carbons: request.carbons ?? true) }
    }

    private static func login(
        _ request: LoginRequest, gateway: GatewayContext, mailbox: ConnectionMailbox, logger: Logger,
        end: @escaping @Sendable (ConnectionStateMachine.Event) async -> Void
    ) async -> LoginOutcome {
        let user: String
        let device: String
        let token: AuthenticatedDevice
        switch await authenticate(request, gateway: gateway) {
        case .success(let identity): (user, device, token) = identity
        case .failure(let refusal): return .refused(refusal.code, refusal.message)
        }
        let expiresAt = token.expiresAt
        let receiptNotices = request.receiptNotices ?? true
        let issuedAt = token.issuedAt.map { Int64($0.timeIntervalSince1970.rounded(.down)) }
        let registration = await gateway.registry.register(user: user, device: device, issuedAt: issuedAt, end: end)
        var logger = logger
        logger[metadataKey: "user"] = "\(user)"
        logger[metadataKey: "device"] = "\(device)"
        var retry = ConnectRetry(deadline: .now + .seconds(gateway.configuration.limits.loginTimeout))
        /// A device that went away during its login (it waited for an older connection to
        /// leave, its turn to connect, a retry) may be logging in elsewhere: a session opened
        /// now would take that one over and KICK it with SESSION_TAKEN_OVER, which tells it to
        /// stay away.
        func abandoned() async -> LoginOutcome {
            logger.debug("the device left during its login: no MQTT session opened")
            await gateway.registry.unregister(user: user, device: device, id: registration)
            return .brokerFailed("\(LoginFailure.deviceGone)")
        }
        while true {
            if mailbox.isDeviceGone { return await abandoned() }
            let session = gateway.makeSession(user: user, device: device, receiptNotices: receiptNotices)
            // Before connecting: a resumed session's queued messages follow CONNACK at once.
            await session.attach(to: mailbox)
            // Nothing here outlives the login's deadline: a session lost at the broker while
            // it subscribes and announces (taken over by a newer login of the device) leaves
            // its QoS 1 publish waiting for a PUBACK that never comes, and a login that never
            // ends holds its connection open, and the next login of the device, which waits
            // for it, and so on. Ending the session fails whatever waits on it.
            let watchdog = Watchdog(until: retry.deadline) { [logger] in
                logger.notice("the MQTT session did not open within the login's time: ended")
                await session.end(.loginTimeout)
            }
            defer { watchdog.cancel() }
            do {
                let connected = try await session.connect(unless: { mailbox.isDeviceGone })
                let fit = gateway.brokerAnnounced(connected.capabilities, persistent: true)
                guard fit.isUsable else { throw LoginFailure.brokerUnfit(fit.refusal) }
                let resumed = connected.sessionPresent
                if !resumed {
                    // A new session has nothing queued: subscribe before LOGIN_OK, so nothing
                    // sent to the device after its login can miss it.
                    try await session.subscribeAndAnnounce(probeOwnDevices: gateway.configuration.broker.presenceProbe)
                }
                if retry.tries > 1 { logger.notice("the broker took the session", metadata: ["tries": "\(retry.tries)"]) }
                // After the subscriptions: what is stored after the stream's end read now
                // reaches the session live.
                let sync = await syncStart(request.position, user: user, device: device, archive: gateway.archive, logger: logger)
                return .opened(
                    session, registration: registration, resumed: resumed, expiresAt: expiresAt, brokerFit: fit, sync: sync,
                    asked: request.position)
            } catch {
                await session.end(.takenOver)
                if mailbox.isDeviceGone { return await abandoned() }
                if let delay = retry.delay(after: error, now: .now) {
                    // A broker that cannot be reached is tried every 250 ms: one line for the
                    // first, the rest at debug (the line for the session taken says how many).
                    let level: Logger.Level = ConnectRetry.isUnreachable(error) && retry.tries > 2 ? .debug : .notice
                    logger.log(level: level, "the broker did not take the session; trying again", metadata: [
                        "error": "\(error)", "tries": "\(retry.tries - 1)", "delay": "\(delay)",
                    ])
                    try? await Task.sleep(for: delay)
                    continue
                }
                // A broker that cannot carry imgw may refuse the session's CONNECT itself (its
                // will is retained): the reason found in a CONNACK that got through says more.
                let unfit = gateway.brokerFit.flatMap { $0.isUsable ? nil : $0.refusal }
                logger.error("cannot open the MQTT session", metadata: ["error": "\(error)", "broker": "\(gateway.broker)", "tries": "\(retry.tries)"])
                await gateway.registry.unregister(user: user, device: device, id: registration)
                let tried = retry.tries > 1 ? " (\(retry.tries) tries)" : ""
                return .brokerFailed(unfit ?? "\(error)\(tried)")
            }
        }
    }

    /// Where the device's catch-up starts (``SyncStart``), from the position LOGIN gave, the
    /// one the archive kept and the stream's bounds; `nil` without an archive. When the
    /// archive cannot be read, a ``LoginSync`` without `last`: the login goes on (live
    /// messages flow) and the connection tries again.
    static func syncStart(_ asked: StreamPosition?, user: String, device: String, archive: MessageArchive?, logger: Logger) async -> LoginSync? {
        guard let archive else { return nil }
        do throws(ArchiveError) {
            let stored = try await archive.position(user: user, device: device)
            let bounds = try await archive.bounds(of: user)
            let start = SyncStart.decide(asked: asked, stored: stored, bounds: bounds, epoch: archive.epoch.rawValue)
            if start.status == .refused || start.status == .epochChanged {
                logger.notice("the device's stream position was not taken", metadata: [
                    "asked": "\(asked.map { "\($0)" } ?? "-")", "status": "\(start.status)", "last": "\(bounds.last)", "position": "\(start.position)",
                ])
            }
            return LoginSync(position: start.position, status: start.status, last: bounds.last, saved: stored)
        } catch {
            logger.warning("cannot read the archive at login: the device is caught up later", metadata: ["error": "\(error)"])
            return LoginSync(position: 0, status: .unavailable, last: nil, saved: nil)
        }
    }

    /// Why an MQTT session that opened is not used.
    enum LoginFailure: Error, CustomStringConvertible {
        /// The broker's CONNACK says imgw cannot work there (``BrokerFit``).
        case brokerUnfit(String)
        /// The device's connection closed before its MQTT session connected.
        case deviceGone

        var description: String {
            switch self {
            case .brokerUnfit(let reason): reason
            case .deviceGone: "the device's connection closed during its login"
            }
        }
    }

    struct Refusal: Error {
        var code: IMErrorCode
        var message: String

        init(code: IMErrorCode, message: String) {
            self.code = code
            self.message = message
        }

        /// FORBIDDEN when a verified `token` is for another user than `user`, or bound to
        /// another device than `device`; AUTH_FAILED when the user's tokens issued before it
        /// was were revoked (LOGIN and TOKEN_REFRESH); `nil` when it is good for them.
        init?(token: AuthenticatedDevice, isNotFor user: String, _ device: String, revocations: TokenRevocations) {
            if token.userID != user {
                self.init(code: .forbidden, message: "the token is for user \(token.userID), not \(user)")
            } else if let bound = token.deviceID, bound != device {
                self.init(code: .forbidden, message: "the token is for device \(bound), not \(device)")
            } else if let revoked = revocations.refusal(of: token) {
                self.init(code: .authFailed, message: revoked)
            } else {
                return nil
            }
        }
    }

    /// Verifies the token; the device id comes from the LOGIN frame, else the token, else
    /// "default", and must match the token's when both say.
    static func authenticate(_ request: LoginRequest, gateway: GatewayContext) async -> Result<(user: String, device: String, token: AuthenticatedDevice), Refusal> {
        let device: AuthenticatedDevice
        do {
            device = try await gateway.verifier.verify(request.token)
        } catch {
            return .failure(Refusal(code: error.errorCode, message: "\(error)"))
        }
        let deviceID = request.deviceID ?? device.deviceID ?? "default"
        do {
            try IMIdentifier.validate(deviceID, kind: .device)
        } catch {
            return .failure(Refusal(code: .invalidUserID, message: "\(error)"))
        }
        if let refusal = Refusal(token: device, isNotFor: device.userID, deviceID, revocations: gateway.revocations) { return .failure(refusal) }
        return .success((device.userID, deviceID, device))
    }

    /// The login task's outcome, back on the event loop (`carbons`: LOGIN's CARBONS).
    func loginFinished(_ outcome: LoginOutcome, carbons: Bool) {
        switch outcome {
        case .opened(let session, let registration, let resumed, let expiresAt, let brokerFit, let sync, let asked):
            link = SessionLink(session: session, registration: registration, brokerFit: brokerFit)
            let grant = LoginGrant(resumed: resumed, tokenExpiry: Self.milliseconds(expiresAt), carbons: carbons, sync: sync, asked: asked)
            perform(machine.handle(.loginSucceeded(tokenDeadline: tokenDeadline(expiresAt), grant: grant)))
        case .refused(let code, let message):
            logger.notice("login refused", metadata: ["error": "\(message)"])
            perform(machine.handle(.loginFailed(code, message)))
        case .brokerFailed(let message):
            perform(machine.handle(.loginFailed(.brokerUnavailable, message)))
        }
        flushIfNeeded()
        armTimer()
    }

    /// When a token that expires at `expiresAt` stops being accepted (the verifier's
    /// leeway included), on the event loop's clock.
    func tokenDeadline(_ expiresAt: Date) -> NIODeadline {
        let left = expiresAt.timeIntervalSinceNow + Double(gateway.configuration.auth.leeway)
        return now + .nanoseconds(Int64((max(0, min(left, 1e9)) * 1e9).rounded()))
    }

    /// LOGIN_OK, then deliveries flow.
    func completeLogin(_ grant: LoginGrant) {
        guard let session, let brokerFit = link?.brokerFit, let loginHeader = machine.loginHeader, let mailbox else { return }
        let sessionID = machine.sessionID
        logger.identify(user: session.user, device: session.device)
        let requests = DeviceRequests(session: session, context: gateway, brokerFit: brokerFit, mailbox: mailbox, logger: logger)
        link?.requests = requests
        lifetime.loggedIn()
        send(.loginOK(LoginOK(
            userID: session.user, deviceID: session.device, serverTime: unixMilliseconds(),
            heartbeatInterval: UInt16(clamping: gateway.configuration.limits.heartbeatInterval),
            tokenExpiry: grant.tokenExpiry, refSequence: loginHeader.sequence, sessionResumed: grant.resumed,
            position: grant.sync.flatMap { sync in sync.last.map { _ in StreamPosition(epoch: gateway.archive!.epoch.rawValue, offset: sync.position) } },
            syncStatus: grant.sync?.status)), sessionID: sessionID)
        logger.info("logged in")

        if grant.resumed {
            // The broker kept the session (and its subscriptions); queued messages may hold
            // our writes until the device ACKs them, so this runs alongside deliveries.
            let logger = self.logger
            let probe = gateway.configuration.broker.presenceProbe
            link?.lane.submit {
                do {
                    try await session.subscribeAndAnnounce(probeOwnDevices: probe)
                } catch MosquittoError.closed, MosquittoError.connectionLost {
                    // The session ended meanwhile (logout, drop, shutdown), or the MQTT
                    // connection did, which closes the device's connection on its own.
                    logger.debug("subscriptions not restored: the session ended")
                } catch {
                    mailbox.post(.sessionFailed("\(error)"))
                }
            }
        }
        // The catch-up starts before the mail that came early: the broker's messages wait for it.
        openArchiveLink(grant.sync, asked: grant.asked)
        receive(machine.takeEarlyMail())
    }

    static func milliseconds(_ date: Date) -> UInt64 {
        UInt64(max(0, date.timeIntervalSince1970 * 1000).rounded())
    }

    // MARK: Token refresh (PROTOCOL.md 6.1.1)

    /// Verifies a TOKEN_REFRESH's token off the event loop; ``tokenRefreshFinished(_:_:)``
    /// answers it. A token of another user, or bound to another device, is refused.
    func refreshToken(_ token: String, _ header: IMFrameHeader) {
        guard let session, let loop = output?.context.eventLoop else { return }
        let verifier = gateway.verifier
        let revocations = gateway.revocations
        let (user, device) = (session.user, session.device)
        let connection = NIOLoopBound(self, eventLoop: loop)
        Task {
            let outcome: Result<Date, Refusal>
            do throws(AuthError) {
                let verified = try await verifier.verify(token)
                outcome = Refusal(token: verified, isNotFor: user, device, revocations: revocations).map { .failure($0) }
                    ?? .success(verified.expiresAt)
            } catch {
                outcome = .failure(Refusal(code: error.errorCode, message: "\(error)"))
            }
            loop.execute { connection.value.tokenRefreshFinished(outcome, header) }
        }
    }

    /// The refresh's verdict, back on the event loop: the session's deadline moves and the
    /// ACK names the new expiry, or a negative ACK says why (the session goes on until the
    /// current token's deadline).
    func tokenRefreshFinished(_ outcome: Result<Date, Refusal>, _ header: IMFrameHeader) {
        guard machine.isLoggedIn else { return }
        switch outcome {
        case .success(let expiresAt):
            perform(machine.handle(.tokenRefreshed(tokenDeadline: tokenDeadline(expiresAt))))
            reply(Ack.tokenRefreshed(sequence: header.sequence, tokenExpiry: Self.milliseconds(expiresAt)), to: header)
            logger.info("token refreshed", metadata: ["expires": "\(expiresAt)"])
        case .failure(let refusal):
            logger.notice("token refresh refused", metadata: ["error": "\(refusal.message)"])
            reply(Ack.refusing(sequence: header.sequence, code: refusal.code, message: refusal.message), to: header)
        }
        flushIfNeeded()
        // A shorter token brings the deadline forward.
        armTimer()
    }
}
