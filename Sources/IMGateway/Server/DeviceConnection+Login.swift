import IMWire
import Logging
import Mosquitto
import NIOCore

extension DeviceConnection {
    /// How a login ended.
    enum LoginOutcome: Sendable {
        /// The token holds and the MQTT session is open (`resumed`: the broker kept it).
        case opened(DeviceSession, registration: UInt64, resumed: Bool)
        /// Refused: ERROR with this code, then close.
        case refused(IMErrorCode, String)
        /// The MQTT session could not be opened (the session was ended again).
        case brokerFailed(String)
    }

    /// Verifies the token and opens the device's MQTT session, on a task of its own; the
    /// outcome comes back to the event loop as `loginSucceeded` or `loginFailed`.
    func startLogin(_ request: LoginRequest, header: IMFrameHeader) {
        guard let loop = channelContext?.eventLoop, let mailbox else { return }
        // Only the header is kept: the body is a slice of the read buffer, which would
        // stay alive for the session (~2 KiB per device).
        loginHeader = header
        Self.spawnLogin(request, gateway: gateway, mailbox: mailbox, logger: logger, connection: NIOLoopBound(self, eventLoop: loop))
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
        let outcome = await login(request, gateway: gateway, mailbox: mailbox, logger: logger) { how in
            // A newer login of this device, or the gateway shutting down.
            try? await loop.flatSubmit { connection.value.leave(how) }.get()
        }
        loop.execute { connection.value.loginFinished(outcome) }
    }

    private static func login(
        _ request: LoginRequest, gateway: GatewayContext, mailbox: ConnectionMailbox, logger: Logger,
        leave: @escaping @Sendable (DeviceSession.Ending) async -> Void
    ) async -> LoginOutcome {
        let user: String
        let device: String
        switch await authenticate(request, gateway: gateway) {
        case .success(let identity): (user, device) = identity
        case .failure(let refusal): return .refused(refusal.code, refusal.message)
        }
        let session = DeviceSession(user: user, device: device, receiptNotices: request.receiptNotices ?? true, context: gateway)
        // Before connecting: a resumed session's queued messages follow CONNACK at once.
        await session.attach(to: mailbox)
        let registration = await gateway.registry.register(user: user, device: device, leave: leave)
        do {
            let resumed = try await session.connect()
            if !resumed {
                // A new session has nothing queued: subscribe before LOGIN_OK, so nothing
                // sent to the device after its login can miss it.
                try await session.subscribeAndAnnounce()
            }
            return .opened(session, registration: registration, resumed: resumed)
        } catch {
            var logger = logger
            logger[metadataKey: "user"] = "\(user)"
            logger[metadataKey: "device"] = "\(device)"
            logger.error("cannot open the MQTT session", metadata: ["error": "\(error)", "broker": "\(gateway.broker)"])
            await session.end(.takenOver)
            await gateway.registry.unregister(user: user, device: device, id: registration)
            return .brokerFailed("\(error)")
        }
    }

    struct Refusal: Error {
        var code: IMErrorCode
        var message: String
    }

    /// Verifies the token; the device id comes from the LOGIN frame, else the token, else
    /// "default", and must match the token's when both say.
    static func authenticate(_ request: LoginRequest, gateway: GatewayContext) async -> Result<(user: String, device: String), Refusal> {
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
        if let claimed = device.deviceID, claimed != deviceID {
            return .failure(Refusal(code: .forbidden, message: "the token is for device \(claimed), not \(deviceID)"))
        }
        return .success((device.userID, deviceID))
    }

    /// The login task's outcome, back on the event loop.
    func loginFinished(_ outcome: LoginOutcome) {
        switch outcome {
        case .opened(let session, let registration, let resumed):
            self.session = session
            self.registration = registration
            self.resumed = resumed
            perform(machine.handle(.loginSucceeded))
        case .refused(let code, let message):
            logger.notice("login refused", metadata: ["error": "\(message)"])
            closeMessage = message
            perform(machine.handle(.loginFailed(code)))
        case .brokerFailed(let message):
            closeMessage = message
            perform(machine.handle(.loginFailed(.brokerUnavailable)))
        }
        flushIfNeeded()
        finishIfDone()
    }

    /// LOGIN_OK, then deliveries flow.
    func completeLogin() {
        guard let context = channelContext, let session, let loginHeader else { return }
        sessionID = loginHeader.sessionID
        logger[metadataKey: "user"] = "\(session.user)"
        logger[metadataKey: "device"] = "\(session.device)"
        let sender = FrameSender(channel: context.channel, sequence: sequence, sessionID: sessionID)
        let requests = DeviceRequests(session: session, context: gateway, sender: sender, logger: logger)
        self.requests = requests
        send(.loginOK(LoginOK(
            userID: session.user, deviceID: session.device, serverTime: unixMilliseconds(),
            heartbeatInterval: UInt16(clamping: gateway.configuration.limits.idleTimeout / 3),
            refSequence: loginHeader.sequence)), sessionID: loginHeader.sessionID)
        context.pipeline.fireUserInboundEventTriggered(ConnectionTimeoutHandler.LoggedIn())
        gateway.statistics.loggedIn.add(1, ordering: .relaxed)
        countedLoggedIn = true
        logger.info("logged in")

        let loop = context.eventLoop
        let bound = NIOLoopBound(self, eventLoop: loop)
        watch = gateway.deliveryWatchdog.watch(deliveries) { age in
            loop.execute { bound.value.deliveryOverdue(age) }
        }
        if resumed {
            // The broker kept the session (and its subscriptions); queued messages may hold
            // our writes until the device ACKs them, so this runs alongside deliveries.
            let logger = self.logger
            lane.submit {
                do {
                    try await session.subscribeAndAnnounce()
                } catch MosquittoError.closed, MosquittoError.connectionLost {
                    // The session ended meanwhile (logout, drop, shutdown), or the MQTT
                    // connection did, which closes the device's connection on its own.
                    logger.debug("subscriptions not restored: the session ended")
                } catch {
                    logger.error("cannot subscribe or announce presence", metadata: ["error": "\(error)"])
                    sender.sendAndClose(.error(ErrorNotice(code: .brokerUnavailable, message: "\(error)")))
                }
            }
        }
        let waiting = early
        early = []
        receive(waiting)
    }
}
