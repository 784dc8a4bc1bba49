import IMWire
import Logging
import NIOCore

/// The life and the data path of one TLV connection as a pure state machine, in the manner of
/// postgres-nio's `ConnectionStateMachine`: ``DeviceConnection`` feeds it every input as an
/// ``Event`` (a frame, the end of a read burst, writability, the timer, the channel closing,
/// graceful shutdown, and the mail its background work sends back: the login's outcome, the
/// broker's messages, chat verdicts, archive pages, token checks, requests' answers) and
/// performs the ``ConnectionAction``s it returns, each carrying what it needs. The machine does
/// no I/O and reads one clock, the ``ConnectionClock`` it is given, for every deadline, rate and
/// timestamp.
///
/// ```text
/// awaitingLogin --LOGIN--> authenticating --login opened--> loggedIn
///       |                        |                               |
///       +------ deadlines, refusal, LOGOUT, takeover, shutdown, broker lost ------+
///                                                                                 v
///            finished <--both ended-- closed(reason, session) <--channel closed-- closing(reason, session)
/// ```
///
/// From LOGIN_OK the logged-in state (``LoggedIn``) holds the data path's sub-machines: what
/// goes to the device (``Downlink``), what goes to the MQTT side (``Uplink``), the deliveries
/// the device has not ACKed (``PendingDeliveries``), its rate limits (``DeviceRateLimits``)
/// and, with an archive, the archive-sync machine (``ArchiveSync``: catching up, gaps, SYNC).
/// HEARTBEAT is answered in every open state, HELLO at most once; requests other than LOGIN
/// are refused with NOT_LOGGED_IN until LOGIN_OK. A connection that opened an MQTT session ends
/// it once its channel has closed, and finishes exactly once, when both are done.
struct ConnectionStateMachine: Sendable {
    /// The connection's time limits and rates (PROTOCOL.md 6.1-6.4, 6.3's rate limit, the token
    /// refresh) and what LOGIN_OK announces.
    struct Limits: Sendable, Hashable {
        /// LOGIN_OK must be reached this long after the connection opened.
        var loginTimeout: TimeAmount
        /// A logged-in device that sends nothing for this long is kicked.
        var idleTimeout: TimeAmount
        /// A delivery not ACKed for this long gets its device kicked.
        var deliveryAckTimeout: TimeAmount
        /// Clock skew tolerated past a token's expiry (as at LOGIN).
        var tokenLeeway: TimeAmount
        /// Chats handed to ``ChatAcceptance`` and not answered, at most (`broker.max_inflight`).
        var maxInFlight: Int
        /// Chat messages a second (0: no limit) and back to back (`limits.chat_rate`, `chat_burst`).
        var chatRate: Double
        var chatBurst: Int
        /// Positions a second (`location.max_updates_per_second`).
        var locationRate: Double
        /// LOGIN_OK's HEARTBEAT_INTERVAL, seconds.
        var heartbeatInterval: UInt16
        /// The archive's epoch; `nil`: the gateway keeps no archive.
        var archiveEpoch: UInt64?

        init(
            loginTimeout: TimeAmount, idleTimeout: TimeAmount, deliveryAckTimeout: TimeAmount, tokenLeeway: TimeAmount,
            maxInFlight: Int = 1000, chatRate: Double = 0, chatBurst: Int = 1, locationRate: Double = 1,
            heartbeatInterval: UInt16 = 30, archiveEpoch: UInt64? = nil
        ) {
            self.loginTimeout = loginTimeout
            self.idleTimeout = idleTimeout
            self.deliveryAckTimeout = deliveryAckTimeout
            self.tokenLeeway = tokenLeeway
            self.maxInFlight = maxInFlight
            self.chatRate = chatRate
            self.chatBurst = chatBurst
            self.locationRate = locationRate
            self.heartbeatInterval = heartbeatInterval
            self.archiveEpoch = archiveEpoch
        }

        /// The limits `configuration` sets, with the archive's epoch (`nil`: none).
        init(_ configuration: GatewayConfiguration, archiveEpoch: UInt64?) {
            let limits = configuration.limits
            self.init(
                loginTimeout: .seconds(Int64(limits.loginTimeout)), idleTimeout: .seconds(Int64(limits.idleTimeout)),
                deliveryAckTimeout: .seconds(Int64(limits.deliveryAckTimeout)), tokenLeeway: .seconds(Int64(configuration.auth.leeway)),
                maxInFlight: configuration.broker.maxInflight, chatRate: limits.chatRate, chatBurst: limits.chatBurst,
                locationRate: configuration.location.maxUpdatesPerSecond,
                heartbeatInterval: UInt16(clamping: limits.heartbeatInterval), archiveEpoch: archiveEpoch)
        }
    }

    /// Where the device's MQTT session is, while the connection ends.
    enum SessionPhase: Sendable, Hashable {
        /// There is none (never logged in, or it has ended).
        case none
        /// The login is still opening it.
        case opening
        /// It is open (LOGIN_OK was sent).
        case open
        /// Ending it was started.
        case ending
    }

    /// Where the connection is.
    enum State: Sendable, Hashable {
        /// Connected; LOGIN is due by the login deadline.
        case awaitingLogin
        /// LOGIN received; the token and the MQTT session are being set up.
        case authenticating
        /// LOGIN_OK sent: the device's session is live.
        case loggedIn
        /// The gateway decided to close for this reason; the channel is still open (its
        /// farewell is being written).
        case closing(CloseReason, session: SessionPhase)
        /// The channel is closed; the MQTT session is not ended yet.
        case closed(CloseReason, session: SessionPhase)
        /// Channel closed and session ended: nothing is left.
        case finished
    }

    /// Why a connection ended; also how its MQTT session is ended (``DeviceSession/end(_:)``).
    enum CloseReason: Sendable, Hashable, CaseIterable {
        /// No LOGIN_OK before the login deadline.
        case loginTimeout
        /// The LOGIN was refused, or the MQTT session could not be opened.
        case loginFailed
        /// Nothing was received for the idle timeout.
        case idleTimeout
        /// A delivery was not ACKed within the delivery ACK timeout.
        case deliveryTimeout
        /// The token expired while logged in, and was not refreshed.
        case tokenExpired
        /// The client logged out: presence "offline" at once, no will.
        case logout
        /// The same device logged in elsewhere: leave the MQTT session to the new connection.
        case takenOver
        /// The app's backend ended the session: disconnect with the will, keeping the MQTT
        /// session (messages wait for the next login).
        case disconnected
        /// The gateway is shutting down: disconnect with the will, keeping the MQTT session.
        case shutdown
        /// The MQTT connection was lost: the device is told, and reconnects.
        case brokerLost
        /// The peer closed or the connection broke: disconnect with the will.
        case connectionLost
    }

    /// An input of the connection.
    enum Event: Sendable {
        /// A frame arrived (framed and checked by the decoder; its body is read here).
        case frame(IMFrame)
        /// The stream cannot be framed any more: the decoder failed with this.
        case malformed(IMWireError)
        /// A read burst ended: what it gathered goes on.
        case readComplete
        /// The socket takes writes again, or stopped taking them.
        case writabilityChanged(Bool)
        /// The channel asks to read.
        case readRequested
        /// The timer armed for the machine's next deadline fired.
        case timerFired
        /// The channel closed (by either side).
        case channelClosed
        /// The gateway is shutting down.
        case shutdown
        /// What the connection's background work and MQTT session sent back, in order.
        case mail([ConnectionMailbox.Mail])
        /// The connection opened (its handler is in place): the login deadline's timer is armed.
        case opened
    }

    /// The current state.
    var state: State = .awaitingLogin
    /// Whether a HELLO was answered (a second one is refused).
    var helloReceived = false
    /// The LOGIN, once received: LOGIN_OK and a refusal refer to its header.
    var login: (header: IMFrameHeader, request: LoginRequest)?
    /// The session id of what the gateway sends on its own (PROTOCOL.md 5.2): the LOGIN's, or
    /// before LOGIN the last frame's.
    var sessionID: UInt16 = 0
    /// The last sequence number of a frame the gateway sent (PROTOCOL.md 5).
    var lastSequence: UInt32 = 0

    let limits: Limits
    let clock: any ConnectionClock
    /// The gateway's counters, and those of the connection's transport.
    let statistics: GatewayStatistics
    let counters: TransportCounters
    /// When LOGIN_OK is due.
    let loginDeadline: NIODeadline
    /// When the last frame arrived.
    var lastHeard: NIODeadline
    /// When the token stops being valid (its expiry plus the leeway), once logged in.
    var tokenDeadline: NIODeadline?
    /// Reads held back, and why.
    var reading = ReadGate()
    /// The deadline the timer is armed for, if any.
    var armed: NIODeadline?
    /// Mail that arrived before LOGIN_OK.
    var early: [ConnectionMailbox.Mail] = []
    /// The logged-in state's data path, from LOGIN_OK until the session has ended.
    var session: LoggedIn?
    /// What the event under way asks for, in order.
    private var actions: [ConnectionAction] = []

    /// A new connection on `clock`, opened now.
    init(limits: Limits, clock: any ConnectionClock, statistics: GatewayStatistics, transport: DeviceTransport = .tcp) {
        self.limits = limits
        self.clock = clock
        self.statistics = statistics
        self.counters = statistics.transport(transport)
        let now = clock.now
        self.loginDeadline = now + limits.loginTimeout
        self.lastHeard = now
    }

    /// Whether LOGIN_OK was sent and the connection is not ending.
    var isLoggedIn: Bool { state == .loggedIn }

    /// Whether the MQTT session is open and not being ended: logged in, or closing before the
    /// channel has closed (what the device ACKed still goes out).
    var isSessionOpen: Bool {
        switch state {
        case .loggedIn, .closing(_, session: .open): true
        default: false
        }
    }

    /// Applies `event`; returns what to do, in order.
    mutating func handle(_ event: Event) -> [ConnectionAction] {
        switch event {
        case .frame(let frame): frameReceived(frame)
        case .malformed(let error): malformed(error)
        case .readComplete: flushUplink()
        case .writabilityChanged(let writable): writabilityChanged(writable)
        case .readRequested: if reading.readRequested() { emit(.read) }
        case .timerFired: timerFired()
        case .channelClosed: channelClosed()
        case .shutdown: leave(nil)
        case .mail(let mail): mailArrived(mail)
        case .opened: break
        }
        keepTimer()
        return takeActions()
    }

    /// The earliest moment at which the timer can change something; `nil` when no deadline
    /// applies.
    var nextDeadline: NIODeadline? {
        switch state {
        case .awaitingLogin, .authenticating:
            return loginDeadline
        case .loggedIn:
            var next = lastHeard + limits.idleTimeout
            if let token = tokenDeadline { next = min(next, token) }
            if let paused = reading.pausedUntil { next = min(next, paused) }
            if let session, let deadline = session.nextDeadline(deliveryAckTimeout: limits.deliveryAckTimeout) { next = min(next, deadline) }
            return next
        case .closing, .closed, .finished:
            return nil
        }
    }

    // MARK: Output

    mutating func emit(_ action: ConnectionAction) {
        actions.append(action)
    }

    private mutating func takeActions() -> [ConnectionAction] {
        defer { actions = [] }
        return actions
    }

    /// Keeps the timer armed for the next deadline: armed again when it comes sooner than the
    /// armed one (one that comes later lets the armed timer fire first, which arms it again).
    private mutating func keepTimer() {
        guard let next = nextDeadline else {
            if armed != nil {
                armed = nil
                emit(.cancelTimer)
            }
            return
        }
        if let armed, armed <= next { return }
        armed = next
        emit(.armTimer(next))
    }

    /// The sequence number of the next frame the gateway sends (1, 2, ...; wraps after
    /// 2^32 - 1, skipping 0).
    mutating func nextSequence() -> UInt32 {
        lastSequence &+= 1
        if lastSequence == 0 { lastSequence = 1 }
        return lastSequence
    }

    /// Writes `message` with the next sequence number (and the connection's session id, unless
    /// given).
    mutating func send(_ message: IMMessage, sessionID: UInt16? = nil) {
        emit(.write(message.frame(sequence: nextSequence(), timestamp: clock.unixSeconds, sessionID: sessionID ?? self.sessionID)))
    }

    /// Writes `ack` in answer to a frame of session `sessionID`.
    mutating func reply(_ ack: Ack, sessionID: UInt16) {
        emit(.write(ack.frame(timestamp: clock.unixSeconds, sessionID: sessionID)))
    }

    /// Refuses the frame with `header`: a negative ACK with `code` and `message`.
    mutating func refuse(_ header: IMFrameHeader, _ code: IMErrorCode, _ message: String?) {
        reply(Ack.refusing(sequence: header.sequence, code: code, message: message), sessionID: header.sessionID)
    }

    mutating func log(_ level: Logger.Level, _ message: Logger.Message, _ metadata: Logger.Metadata = [:]) {
        emit(.log(level, message, metadata))
    }

    // MARK: Reading and writing

    private mutating func writabilityChanged(_ writable: Bool) {
        let read = reading.update(writable: writable)
        if writable { writeDownlink() }
        if read { emit(.read) }
    }

    /// Tells the read gate how many chats wait for their turn; reads again if it says so.
    mutating func chatsChanged() {
        if reading.update(waitingChats: session?.uplink.waitingChats ?? 0) { emit(.read) }
    }

    /// Writes queued frames in priority order while the socket takes them (frames leave at
    /// the end of the turn, so writability does not change meanwhile); then the SYNC ACKs
    /// that waited for the chat deliveries before them.
    mutating func writeDownlink() {
        guard isLoggedIn, reading.writable, var session = self.session else { return }
        self.session = nil
        let now = clock.now
        let timestamp = clock.unixSeconds
        while let entry = session.downlink.queue.dequeue() {
            let sequence = nextSequence()
            if entry.isAwaited {
                session.deliveries.insert(sequence, deliveryID: entry.deliveryID, origin: entry.origin, offset: entry.offset, now: now)
            }
            emit(.write(entry.message.frame(sequence: sequence, timestamp: timestamp, sessionID: sessionID)))
        }
        for (ack, sessionID) in session.takeSyncAcks() { emit(.write(ack.frame(timestamp: timestamp, sessionID: sessionID))) }
        self.session = session
    }

    // MARK: Timers

    private mutating func timerFired() {
        armed = nil
        let now = clock.now
        switch state {
        case .awaitingLogin, .authenticating:
            guard now >= loginDeadline else { return }
            close(.loginTimeout, code: .loginTimeout, "no login within \(Self.seconds(limits.loginTimeout)) s")
        case .loggedIn:
            if let token = tokenDeadline, now >= token {
                return close(.tokenExpired, code: .tokenExpired, "the token expired; log in with a new one")
            }
            if now >= lastHeard + limits.idleTimeout {
                return close(.idleTimeout, code: .idleTimeout, "nothing received for \(Self.seconds(limits.idleTimeout)) s")
            }
            if let oldest = session?.deliveries.oldest, now >= oldest + limits.deliveryAckTimeout {
                return close(.deliveryTimeout, code: .idleTimeout,
                    "delivery not acknowledged within \(Self.seconds(limits.deliveryAckTimeout)) s")
            }
            if reading.pauseEnded(now: now) { emit(.read) }
            // The data path's deadlines: receipts gathered for their window, the archive's timer.
            flushUplink()
            archiveTimerFired(now: now)
        case .closing, .closed, .finished:
            return
        }
    }

    static func seconds(_ amount: TimeAmount) -> Int64 { amount.nanoseconds / 1_000_000_000 }
}
