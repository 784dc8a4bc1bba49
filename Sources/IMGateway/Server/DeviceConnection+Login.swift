import Foundation
import IMArchive
import IMWire
import Logging
import Mosquitto
import NIOCore

extension DeviceConnection {
    /// Verifies the token and opens the device's MQTT session, on a task of its own, within
    /// `time` (what is left of the connection's login deadline); the outcome comes back as mail.
    func startLogin(_ request: LoginRequest, within time: TimeAmount) {
        guard let mailbox, let loop = output?.context.eventLoop else { return }
        Self.spawnLogin(request, gateway: gateway, mailbox: mailbox, logger: logger.logger, loop: loop, within: time)
    }

    // (A static function: the task captures only what it is given.)
    private static func spawnLogin(
        _ request: LoginRequest, gateway: GatewayContext, mailbox: ConnectionMailbox, logger: Logger, loop: any EventLoop, within time: TimeAmount
    ) {
        let deadline = ContinuousClock.now + .nanoseconds(max(0, time.nanoseconds))
        Task {
            let outcome = await Self.login(request, gateway: gateway, mailbox: mailbox, logger: logger, deadline: deadline) { reason in
                // A newer login of this device, or the backend's disconnect: it waits until
                // this connection has finished.
                let finished = loop.makePromise(of: Void.self)
                mailbox.post(.leave(reason, finished))
                try? await finished.futureResult.get()
            }
            mailbox.post(.loginFinished(outcome))
        }
    }

    private static func login(
        _ request: LoginRequest, gateway: GatewayContext, mailbox: ConnectionMailbox, logger: Logger, deadline: ContinuousClock.Instant,
        leave: @escaping @Sendable (ConnectionStateMachine.LeaveReason) async -> Void
    ) async -> LoginOutcome {
        let user: String
        let device: String
        let token: AuthenticatedDevice
        switch await authenticate(request, gateway: gateway) {
        case .success(let identity): (user, device, token) = identity
        case .failure(let refusal): return .refused(refusal.code, refusal.message)
        }
        let expiresAt = Self.milliseconds(token.expiresAt)
        let receiptNotices = request.receiptNotices ?? true
        let issuedAt = token.issuedAt.map { Int64($0.timeIntervalSince1970.rounded(.down)) }
        let registration = await gateway.registry.register(user: user, device: device, issuedAt: issuedAt, end: leave)
        var logger = logger
        logger[metadataKey: "user"] = "\(user)"
        logger[metadataKey: "device"] = "\(device)"
        var retry = ConnectRetry(deadline: deadline)
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
            let watchdog = Task { [logger] in
                // Cancelled: the login ended first (a cancelled sleep returns at once).
                guard (try? await Task.sleep(until: deadline, clock: .continuous)) != nil else { return }
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
                return .opened(OpenedSession(
                    session: session, registration: registration, brokerFit: fit, resumed: resumed, expiresAt: expiresAt, sync: sync))
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

    /// Verifies the token; the device id comes from the LOGIN frame, else the token, else
    /// "default", and must match the token's when both say.
    static func authenticate(_ request: LoginRequest, gateway: GatewayContext) async -> Result<(user: String, device: String, token: AuthenticatedDevice), LoginRefusal> {
        let device: AuthenticatedDevice
        do {
            device = try await gateway.verifier.verify(request.token)
        } catch {
            return .failure(LoginRefusal(code: error.errorCode, message: "\(error)"))
        }
        let deviceID = request.deviceID ?? device.deviceID ?? "default"
        do {
            try IMIdentifier.validate(deviceID, kind: .device)
        } catch {
            return .failure(LoginRefusal(code: .invalidUserID, message: "\(error)"))
        }
        if let refusal = LoginRefusal(token: device, isNotFor: device.userID, deviceID, revocations: gateway.revocations) { return .failure(refusal) }
        return .success((device.userID, deviceID, device))
    }

    static func milliseconds(_ date: Date) -> UInt64 {
        UInt64(max(0, date.timeIntervalSince1970 * 1000).rounded())
    }

    // MARK: Token refresh (PROTOCOL.md 6.1.1)

    /// Verifies a TOKEN_REFRESH's token off the event loop; the verdict comes back as mail. A
    /// token of another user, or bound to another device, is refused.
    func verifyToken(_ token: String, _ header: IMFrameHeader) {
        guard let session = link?.session, let mailbox else { return }
        Self.spawnVerification(token, header, user: session.user, device: session.device, gateway: gateway, mailbox: mailbox)
    }

    private static func spawnVerification(
        _ token: String, _ header: IMFrameHeader, user: String, device: String, gateway: GatewayContext, mailbox: ConnectionMailbox
    ) {
        let verifier = gateway.verifier
        let revocations = gateway.revocations
        Task {
            let outcome: Result<UInt64, LoginRefusal>
            do throws(AuthError) {
                let verified = try await verifier.verify(token)
                outcome = LoginRefusal(token: verified, isNotFor: user, device, revocations: revocations).map { .failure($0) }
                    ?? .success(Self.milliseconds(verified.expiresAt))
            } catch {
                outcome = .failure(LoginRefusal(code: error.errorCode, message: "\(error)"))
            }
            mailbox.post(.tokenVerified(outcome, header))
        }
    }
}
