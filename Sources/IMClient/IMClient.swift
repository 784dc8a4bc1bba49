#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import IMWire
import NIOCore
import Synchronization

/// A logged-in device on an IMGateway: chat, receipts, presence, location sharing and
/// pub/sub over the TLV protocol (docs/PROTOCOL.md), kept connected across a bad network.
///
/// ```swift
/// let client = try await IMClient.connect(.init(token: token, deviceID: "phone"))
/// let receipt = try await client.send(to: "bob", text: "hi")   // returns once the gateway ACKed it
/// for await event in client.events {
///     if case .message(let message) = event { print("\(message.from): \(message.text ?? "")") }
/// }
/// ```
///
/// Reliability (seeds 000 and 003, PROTOCOL.md 10):
/// - **Reconnect.** A lost connection is reopened after a random delay in seed 003's levels,
///   (0-1], (1-2], (2-4] ... (16-32] s, reset by a successful login;
///   ``networkAvailable()`` skips the wait. Never after ``logout()``, ``close()``, a refused
///   login, or KICK SESSION_TAKEN_OVER. ``events`` reports ``Event/reconnecting(_:)`` and
///   ``Event/reconnected(_:)``; watches, subscriptions and a location share are restored.
/// - **Outbox.** Chat messages, receipts and QoS ≥ 1 publishes stay in the ``Outbox`` until
///   ACKed: written again with the same id and RESEND when their ACK is overdue and after
///   every reconnect, in priority order (chat, receipts, presence, location, pub/sub).
///   ``send(to:text:messageID:)`` returns once the gateway ACKed, however many connections
///   that took, within ``Configuration/sendTimeout``.
/// - **Heartbeat.** ``AdaptiveHeartbeat``: a HEARTBEAT when the link has been quiet for the
///   current interval, which grows while heartbeats succeed and shrinks when they fail;
///   three unanswered in a row and the connection is declared dead and replaced.
/// - **Dedup.** Deliveries are surfaced once per (sender, message id), also across reconnects,
///   and ACKed every time.
/// - **Token refresh.** With a ``Configuration/tokenProvider``, the session outlives its
///   token: ``TokenRefreshSchedule`` says when to ask the provider for a new one, which is
///   handed to the gateway (TOKEN_REFRESH, PROTOCOL.md 6.1.1) and used for later LOGINs;
///   ``refreshToken(_:)`` does it by hand.
public actor IMClient {
    /// What the gateway sends this device, in arrival order, across reconnects, until the
    /// client ends. Iterate it once (a second iterator would take a share of the events).
    /// Events wait in an unbounded buffer until taken; ``batched(_:)`` groups a backlog.
    public nonisolated let events: AsyncStream<Event>
    /// The configuration this client connected with.
    public nonisolated let configuration: Configuration

    /// The session of the latest LOGIN_OK.
    public nonisolated var session: Session {
        guard let session = sessionBox.withLock({ $0 }) else { preconditionFailure("IMClient is returned logged in") }
        return session
    }

    /// Where the connection is now.
    public var connectionState: ConnectionState {
        switch machine.state {
        case .disconnected: .disconnected
        case .connecting: .connecting
        case .connected: .connected
        case .disconnecting: .disconnecting
        }
    }

    /// How long a connection that went silent (a NAT dropped it, the network is a black hole)
    /// may take to be declared dead, with the heartbeat's current interval; `nil` before the
    /// first login.
    public var deadConnectionBound: Duration? { heartbeat?.detectionBound }

    /// The token the next LOGIN carries: ``Configuration/token`` at first, then the newest
    /// one the gateway accepted in a refresh (or the provider gave for a LOGIN).
    public var currentToken: String { newestToken }

    /// Where this device is in its stream of stored messages, on a gateway with an archive
    /// (`nil` before one said so): an app keeps it (with the messages it stored) and gives it
    /// back as ``Configuration/syncPosition`` when it starts again. It counts every message
    /// the client has put on ``events``, handled by the app or not: when the app goes away,
    /// read it after ``close()`` and after handling what was still on ``events`` (the
    /// sequence ends once that is handed out), or messages the app never saw count as had.
    public var syncPosition: StreamPosition? { router.cursor.position }

    /// Requests the gateway refused with "later" (RATE_LIMITED, STORE_UNAVAILABLE,
    /// BROKER_UNAVAILABLE) that this client sent again by itself, since it was made: what an
    /// app sees of them is only a later answer. For diagnostics.
    public internal(set) var retriedRefusals = 0

    /// The session id this client puts in its frames (any value is valid).
    static let sessionID: UInt16 = 1

    /// Opens a channel of frames to the gateway (TCP, or an embedded channel in tests).
    typealias Dialer = @Sendable (Configuration) async throws -> NIOAsyncChannel<IMFrame, IMFrame>
    /// A waiter for a request's answer.
    typealias Waiter = CheckedContinuation<Result<Ack, IMClientError>, Never>

    let dialer: Dialer
    let eventSink: AsyncStream<Event>.Continuation
    private let sessionBox = Mutex<Session?>(nil)
    let clock = ContinuousClock()
    var random = SystemRandomNumberGenerator()

    var machine = ConnectionStateMachine()
    var heartbeat: AdaptiveHeartbeat?
    var outbox: Outbox
    var router: InboundRouter
    var sequence = SequenceCounter()
    /// Who waits for which outbox entry.
    var waiters: [OutboxEntry.ID: Waiter] = [:]
    /// Entries whose negative ACK said "later" (RATE_LIMITED, BROKER_UNAVAILABLE): back in
    /// the outbox at the instant given.
    var deferred: [(id: OutboxEntry.ID, entry: OutboxEntry, at: ContinuousClock.Instant)] = []
    /// No chat is written before this (the gateway's RETRY_AFTER of a RATE_LIMITED chat).
    var chatPausedUntil: ContinuousClock.Instant?
    /// Entries enqueued whose caller has not started waiting yet, and answers that came
    /// for them in between.
    var unclaimed: Set<OutboxEntry.ID> = []
    var early: [OutboxEntry.ID: Result<Ack, IMClientError>] = [:]
    /// Watches and subscriptions being restored after a reconnect (nobody waits for them).
    var restoring: Set<OutboxEntry.ID> = []

    /// The current transport and its number (frames from older ones are ignored).
    var connection: Connection?
    var generation = 0
    var loginDeadline: ContinuousClock.Instant?
    /// When the current connection was opened (its login time seeds the RTT estimate).
    var openedAt: ContinuousClock.Instant?
    var reconnectAt: ContinuousClock.Instant?
    /// Why the current or last connection ended, for the event and the error.
    var lastCause: IMClientError = .disconnected
    var hasLoggedIn = false
    private var firstLogin: CheckedContinuation<Result<Session, IMClientError>, Never>?
    private var finishWaiters: [CheckedContinuation<Void, Never>] = []
    var endedByApplication = false

    /// The one timer: wakes at the earliest deadline (login, reconnect, ACK, heartbeat).
    private var timer: (deadline: ContinuousClock.Instant, id: Int, task: Task<Void, Never>)?
    private var timerIDs = 0

    /// The last SYNC's outcome (``sync()`` returns it).
    var lastSync: SyncResult?
    /// Answers that are messages (HISTORY_PAGE, CONVERSATION_LIST), by the sequence of the
    /// request they answer, until its caller takes them.
    var answers: [UInt32: IMMessage] = [:]

    /// What is restored after a reconnect.
    var presenceWatches: Set<String> = []
    var locationWatches: Set<String> = []
    var subscriptions: [String: IMQoS] = [:]
    var locationShare: (audience: [String], until: ContinuousClock.Instant)?

    /// The token for the next LOGIN (``currentToken``).
    var newestToken: String
    /// When to refresh it (only with a token provider).
    var tokenSchedule: TokenRefreshSchedule
    /// The gateway said the token expired (KICK or refused LOGIN): the next LOGIN needs a
    /// new one from the provider.
    var tokenExpired = false

    // MARK: Connecting

    /// Connects, logs in, and returns the logged-in client; from then on it stays connected
    /// (see the type's documentation) until ``close()`` or ``logout()``.
    ///
    /// - Throws: if the first login fails: ``IMClientError/cannotConnect(host:port:reason:)``,
    ///   ``IMClientError/loginRefused(_:_:)`` (from the gateway's ERROR),
    ///   ``IMClientError/timeout`` (no LOGIN_OK within the connect timeout), or
    ///   ``IMClientError/disconnected`` (the gateway closed the connection first).
    public static func connect(_ configuration: Configuration) async throws(IMClientError) -> IMClient {
        try await connect(configuration, dialer: { try await Connection.dial($0) })
    }

    /// Connects through `dialer` (tests: embedded channels).
    static func connect(_ configuration: Configuration, dialer: @escaping Dialer) async throws(IMClientError) -> IMClient {
        let client = IMClient(configuration: configuration, dialer: dialer)
        try await client.start()
        return client
    }

    private init(configuration: Configuration, dialer: @escaping Dialer) {
        self.configuration = configuration
        self.dialer = dialer
        (self.events, self.eventSink) = AsyncStream.makeStream(of: Event.self)
        self.router = InboundRouter(dedupWindow: configuration.dedupWindow, position: configuration.syncPosition)
        self.outbox = Outbox(maxInFlight: max(1, configuration.maxInFlight), maxRetransmits: max(0, configuration.maxRetransmits))
        self.newestToken = configuration.token
        self.tokenSchedule = TokenRefreshSchedule(configuration: configuration.tokenRefresh)
    }

    /// Loads the outbox store, connects, and waits for the first LOGIN_OK.
    private func start() async throws(IMClientError) {
        if let store = configuration.outboxStore, let saved = try? await store.load(), !saved.isEmpty {
            outbox.restore(saved)
        }
        let result = await withCheckedContinuation { (waiter: CheckedContinuation<Result<Session, IMClientError>, Never>) in
            firstLogin = waiter
            handle(.connect)
        }
        if case .failure(let error) = result { throw error }
    }

    // MARK: Lifecycle

    /// Tells the client the network is available again (e.g. from the platform's path
    /// monitor): a pending reconnect starts now instead of after its delay; a connected
    /// client checks its connection with one heartbeat, and reconnects at once if that goes
    /// unanswered for an ACK timeout (RTT-based), instead of waiting for three.
    public func networkAvailable() {
        handle(.networkAvailable)
    }

    /// Tells the client the device moved to another network (Wi-Fi to cellular, a new
    /// address): a connection made over the old one cannot survive, so it is dropped and a
    /// new one opened at once, without a backoff delay (``Event/reconnecting(_:)`` with
    /// ``IMClientError/networkChanged`` and a zero delay). What was in flight is sent again
    /// (chat with RESEND), as after any reconnect.
    public func networkChanged() {
        handle(.networkChanged)
    }

    /// Foreground (the app is in use: a fixed heartbeat if
    /// ``AdaptiveHeartbeat/Configuration/foregroundInterval`` is set, and a heartbeat at once
    /// when coming back) or background (adaptive, to save battery and find the NAT timeout).
    public func setAppMode(_ mode: AdaptiveHeartbeat.Mode) {
        heartbeat?.setMode(mode, now: clock.now)
        schedule()
    }

    /// Ends this device's session (its presence goes offline, and messages not yet
    /// delivered to it are dropped by the gateway), then closes. ``events`` finishes without
    /// ``Event/disconnected``; requests still waiting throw ``IMClientError/disconnected``.
    /// To keep the session, use ``close()``.
    public func logout() async {
        if machine.state == .connected {
            // The gateway closes after its ACK: that close must not start a reconnect.
            endedByApplication = true
            _ = try? await request(.logout(Logout()), priority: .chat, durable: false, timeout: configuration.ackTimeout)
        }
        await close()
    }

    /// Closes the connection without logging out and stops reconnecting: the gateway keeps
    /// this device's session and queues its messages for the next login. ``events`` finishes
    /// without ``Event/disconnected``; requests still waiting throw
    /// ``IMClientError/disconnected`` (chat messages stay in the ``Configuration/outboxStore``
    /// if there is one).
    public func close() async {
        endedByApplication = true
        handle(.disconnect)
        guard !isFinishedCompletely else { return }
        await withCheckedContinuation { finishWaiters.append($0) }
    }

    private var isFinishedCompletely: Bool { machine.isFinished && machine.state == .disconnected }

    /// Feeds the state machine and carries out its actions.
    func handle(_ event: ConnectionStateMachine.Event) {
        for action in machine.handle(event) {
            perform(action)
        }
        schedule()
    }

    private func perform(_ action: ConnectionStateMachine.Action) {
        switch action {
        case .openConnection:
            open()
        case .closeConnection:
            loginDeadline = nil
            connection?.close()
            if machine.state != .disconnecting { connection = nil }
        case .loggedIn:
            loggedIn()
        case .connectionDown:
            connectionDown()
        case .scheduleReconnect(let attempt):
            let delay = configuration.backoff.delay(attempt: attempt, using: &random)
            reconnectAt = clock.now + delay
            eventSink.yield(.reconnecting(Reconnecting(cause: lastCause, attempt: attempt, delay: delay)))
        case .cancelReconnect:
            reconnectAt = nil
        case .probeConnection:
            sendHeartbeat(probe: true)
        case .reconnectNow:
            // (Only after networkChanged().)
            lastCause = .networkChanged
            eventSink.yield(.reconnecting(Reconnecting(cause: .networkChanged, attempt: 0, delay: .zero)))
            open()
        case .finish:
            finish()
        }
    }

    /// Opens a new connection (its reader sends LOGIN and feeds frames back).
    private func open() {
        generation += 1
        router.connectionStarted()
        openedAt = clock.now
        loginDeadline = clock.now + configuration.connectTimeout
        let connection = Connection(generation: generation)
        self.connection = connection
        connection.start(client: self, dialer: dialer, configuration: configuration)
    }

    /// LOGIN_OK: the session, the heartbeat, restored registrations, the outbox.
    func loggedIn(_ ok: LoginOK, generation: Int) {
        guard generation == self.generation, machine.state == .connecting else { return }
        let announced = ok.heartbeatInterval.flatMap { $0 > 0 ? Duration.seconds(Int($0)) : nil } ?? Configuration.defaultHeartbeatInterval
        let session = Session(
            userID: ok.userID, deviceID: ok.deviceID ?? configuration.deviceID, serverTime: ok.serverTime, heartbeatInterval: announced,
            resumed: ok.sessionResumed, syncStatus: ok.syncStatus)
        sessionBox.withLock { $0 = session }
        tokenSchedule.loggedIn(serverTime: ok.serverTime ?? Self.unixMilliseconds(), tokenExpiry: ok.tokenExpiry, now: clock.now)
        handle(.connectSucceeded)
    }

    private func loggedIn() {
        loginDeadline = nil
        let now = clock.now
        if heartbeat == nil {
            heartbeat = AdaptiveHeartbeat(configuration: configuration.heartbeat(announced: session.heartbeatInterval), mode: configuration.appMode, now: now)
        }
        heartbeat?.connectionStarted(now: now)
        // Connect and login took a few round trips: until a heartbeat measures one, the
        // ACK timeout starts from this (an over-estimate, which only errs on the safe side).
        if let openedAt { heartbeat?.roundTripMeasured(now - openedAt) }
        if hasLoggedIn {
            restoreRegistrations()
            eventSink.yield(.reconnected(session))
        }
        hasLoggedIn = true
        if configuration.syncOnLogin, router.cursor.position != nil { startSync() }
        if let firstLogin {
            self.firstLogin = nil
            firstLogin.resume(returning: .success(session))
        }
        pump()
    }

    /// The logged-in connection is gone: what was in flight goes back to the queue (durable)
    /// or fails (the rest).
    private func connectionDown() {
        tokenSchedule.connectionLost()
        for entry in outbox.connectionLost() {
            restoring.remove(entry.id)
            let outcome = Result<Ack, IMClientError>.failure(.disconnected)
            if let waiter = waiters.removeValue(forKey: entry.id) {
                waiter.resume(returning: outcome)
            } else if unclaimed.contains(entry.id) {
                early[entry.id] = outcome
            }
        }
    }

    /// The transport of `generation` ended (closed by the gateway, reset, or closed by us).
    func transportEnded(generation: Int, cause: IMClientError) {
        guard generation == self.generation else { return }
        connection = nil
        switch machine.state {
        case .connecting:
            lost(cause)
        case .connected:
            lost(cause)
        case .disconnecting:
            handle(.disconnectCompleted)
        case .disconnected:
            break
        }
    }

    /// The current connection is lost or failed because of `cause`.
    func lost(_ cause: IMClientError) {
        lastCause = cause
        switch cause {
        case .kicked(let code, _) where code == .tokenExpired, .loginRefused(let code, _) where code == .tokenExpired:
            tokenExpired = true
        default:
            break
        }
        let failure: ConnectionStateMachine.Failure = isTerminal(cause) ? .terminal : .transient
        switch machine.state {
        case .connecting: handle(.connectFailed(failure))
        case .connected: handle(.connectionLost(failure))
        case .disconnecting: handle(.disconnectCompleted)
        case .disconnected: break
        }
    }

    /// Whether `cause` ends the client rather than start a reconnect.
    private func isTerminal(_ cause: IMClientError) -> Bool {
        guard hasLoggedIn, configuration.reconnect, !endedByApplication else { return true }
        switch cause {
        case .kicked(let code, _), .loginRefused(let code, _):
            // An expired token is no reason to stop when a new one can be had.
            if code == .tokenExpired, configuration.tokenProvider != nil { return false }
            return ![IMErrorCode.serverShuttingDown, .idleTimeout, .brokerUnavailable, .internalError, .loginTimeout].contains(code)
        default:
            return false
        }
    }

    /// The end: everything waiting fails, the events finish.
    private func finish() {
        reconnectAt = nil
        loginDeadline = nil
        timer?.task.cancel()
        timer = nil
        if let firstLogin {
            self.firstLogin = nil
            firstLogin.resume(returning: .failure(lastCause))
        }
        for (_, waiter) in waiters { waiter.resume(returning: .failure(.disconnected)) }
        waiters.removeAll()
        for id in unclaimed { early[id] = .failure(.disconnected) }
        deferred.removeAll()
        if hasLoggedIn && !endedByApplication { eventSink.yield(.disconnected) }
        eventSink.finish()
        let waiting = finishWaiters
        finishWaiters.removeAll()
        for waiter in waiting { waiter.resume() }
    }

    // MARK: Timer

    /// Arms the timer for the earliest deadline, if it is earlier than the armed one.
    func schedule() {
        guard !machine.isFinished || machine.state == .disconnecting else { return }
        let pauseEnds = chatPausedUntil.flatMap { $0 > clock.now ? $0 : nil }
        var next = [loginDeadline, reconnectAt, deferred.map(\.at).min(), pauseEnds].compactMap { $0 }.min()
        if machine.state == .connected {
            if let deadline = outbox.nextDeadline { next = min(next ?? deadline, deadline) }
            if var probe = heartbeat {
                // On a copy: asking the policy must not count a failure twice.
                let now = clock.now
                let due: ContinuousClock.Instant
                if case .wait(let until) = probe.nextAction(now: now) { due = until } else { due = now }
                next = min(next ?? due, due)
            }
            if configuration.tokenProvider != nil {
                switch tokenSchedule.nextAction(now: clock.now) {
                case .refresh: next = min(next ?? clock.now, clock.now)
                case .wait(let until): next = min(next ?? until, until)
                case .none: break
                }
            }
        }
        guard let next else { return }
        if let timer, timer.deadline <= next { return }
        timer?.task.cancel()
        timerIDs += 1
        let id = timerIDs
        timer = (next, id, Task { [weak self] in
            try? await Task.sleep(until: next, clock: .continuous)
            guard !Task.isCancelled else { return }
            await self?.tick(id)
        })
    }

    private func tick(_ id: Int) {
        guard timer?.id == id else { return }
        timer = nil
        let now = clock.now
        if let deadline = loginDeadline, deadline <= now {
            loginDeadline = nil
            connection?.close()
            lost(.timeout)
        }
        if let at = reconnectAt, at <= now {
            reconnectAt = nil
            handle(.reconnectDue)
        }
        let due = deferred.filter { $0.at <= now }
        if !due.isEmpty {
            deferred.removeAll { $0.at <= now }
            outbox.restore(due.map(\.entry))
        }
        if machine.state == .connected {
            let expiry = outbox.expire(now: now)
            if expiry.connectionBroken {
                connection?.close()
                lost(.timeout)
            }
        }
        if machine.state == .connected, var heartbeat {
            let action = heartbeat.nextAction(now: now)
            self.heartbeat = heartbeat
            switch action {
            case .sendHeartbeat:
                sendHeartbeat()
            case .dead:
                connection?.close()
                lost(.connectionDead)
            case .wait:
                break
            }
        }
        refreshTokenIfDue(now: now)
        pump()
        schedule()
    }

    // MARK: Writing

    /// Writes what the outbox allows now.
    func pump() {
        guard machine.state == .connected, let connection else { return }
        let now = clock.now
        let paused: Set<OutboxPriority> = chatPaused(now: now) ? [.chat] : []
        for entry in outbox.nextToSend(paused: paused) {
            let sequence = nextSequence()
            outbox.markSent(entry.id, sequence: sequence, deadline: now + configuration.ackTimeout)
            let message = entry.resend ? entry.message.markedResend() : entry.message
            write(message.frame(sequence: sequence, timestamp: Self.unixSeconds(), sessionID: Self.sessionID), on: connection)
        }
        schedule()
    }

    /// Whether chat waits after a RATE_LIMITED or STORE_UNAVAILABLE: until the gateway's
    /// retry time has passed and every chat written before it has its answer. The gateway
    /// refuses each chat until then, so those still in flight come back and go again in
    /// their places; writing the queue before their answers would put them behind it.
    private func chatPaused(now: ContinuousClock.Instant) -> Bool {
        guard let until = chatPausedUntil else { return false }
        if until > now || outbox.hasInFlight(.chat) { return true }
        chatPausedUntil = nil
        return false
    }

    /// A HEARTBEAT now: the policy said it is due, or (`probe`) the network came back and
    /// the connection must prove itself at once.
    private func sendHeartbeat(probe: Bool = false) {
        guard machine.state == .connected, let connection else { return }
        // A heartbeat already on its way is the probe (a new one would restart the wait).
        if probe, heartbeat?.makeOutstandingDecisive(now: clock.now) == true { return }
        let sequence = nextSequence()
        if probe {
            heartbeat?.probeSent(sequence: sequence, at: clock.now)
        } else {
            heartbeat?.heartbeatSent(sequence: sequence, at: clock.now)
        }
        write(IMFrame.heartbeat(sequence: sequence, timestamp: Self.unixSeconds(), sessionID: Self.sessionID), on: connection)
    }

    func nextSequence() -> UInt32 {
        sequence.next(skipping: { outbox.isInFlight(sequence: $0) })
    }

    func write(_ frame: IMFrame, on connection: Connection) {
        heartbeat?.frameSent(at: clock.now)
        connection.write(frame)
    }

    // MARK: Helpers

    static func unixSeconds() -> UInt32 {
        UInt32(clamping: Int(Date().timeIntervalSince1970))
    }

    /// The device's clock in Unix milliseconds (only when the gateway gave no SERVER_TIME).
    static func unixMilliseconds() -> UInt64 {
        UInt64(clamping: Int64(Date().timeIntervalSince1970 * 1000))
    }

    /// A new message id: a lowercase UUID.
    public static func makeMessageID() -> String {
        UUID().uuidString.lowercased()
    }
}
