import IMWire
import NIOCore

/// The life of one TLV connection as a pure state machine, in the manner of postgres-nio's
/// `ConnectionStateMachine`: ``DeviceConnection`` feeds it events and performs the action
/// each returns; the machine does no I/O and reads no clock (every event that depends on
/// time carries `now`, on the event loop's clock).
///
/// It owns what decides the connection's course: the login, the deadlines (login, idle,
/// delivery ACK, token expiry, the receipt window, the archive's timer), the deliveries the
/// device has not ACKed, takeover, shutdown, the loss of the broker, and the two halves of
/// ending (the TLV channel and the device's MQTT session), so that a connection is finished
/// exactly once, when both are. Its data path (ConnectionStateMachine+DataPath.swift) holds
/// what goes to the device (``Downlink``) and to the broker (``Uplink``), the device's rate
/// limits, mail that came before LOGIN_OK, the archive's side of the connection and the
/// sequence numbers of the gateway's frames.
///
/// ```text
/// awaitingLogin --LOGIN--> authenticating --loginSucceeded--> loggedIn
///       |                        |                               |
///       +------ deadlines, refusal, LOGOUT, takeover, shutdown, broker lost ------+
///                                                                                 v
///            finished <--both ended-- closed(reason, session) <--channel closed-- closing(reason, session)
/// ```
///
/// HEARTBEAT is answered in every open state, HELLO at most once; requests other than LOGIN
/// are refused with NOT_LOGGED_IN until LOGIN_OK. A connection that reached LOGIN_OK ends
/// its MQTT session once its channel has closed (``ConnectionAction/endSession(_:)``); a
/// login that completes after the connection gave up is ended the same way.
public struct ConnectionStateMachine: Sendable {
    /// The time limits of a connection (PROTOCOL.md 6.1, 6.2, 6.4 and the token refresh).
    public struct Limits: Sendable, Hashable {
        /// LOGIN_OK must be reached this long after the connection opened.
        public var loginTimeout: TimeAmount
        /// A logged-in device that sends nothing for this long is kicked.
        public var idleTimeout: TimeAmount
        /// A delivery not ACKed for this long gets its device kicked.
        public var deliveryAckTimeout: TimeAmount
        /// Clock skew tolerated past a token's expiry (as at LOGIN).
        public var tokenLeeway: TimeAmount
        /// Chat messages handed to the MQTT client and not settled, at most (`broker.max_inflight`).
        public var maxInFlight: Int
        /// Chat messages a second (0: no limit) and back to back (`limits.chat_rate`, `chat_burst`).
        public var chatRate: Double
        public var chatBurst: Int
        /// Positions a second (`location.max_updates_per_second`).
        public var locationRate: Double

        /// Limits in whole seconds, as the configuration gives them.
        public init(
            loginTimeout: TimeAmount, idleTimeout: TimeAmount, deliveryAckTimeout: TimeAmount, tokenLeeway: TimeAmount,
            maxInFlight: Int = 1000, chatRate: Double = 0, chatBurst: Int = 1, locationRate: Double = 1
        ) {
            self.loginTimeout = loginTimeout
            self.idleTimeout = idleTimeout
            self.deliveryAckTimeout = deliveryAckTimeout
            self.tokenLeeway = tokenLeeway
            self.maxInFlight = maxInFlight
            self.chatRate = chatRate
            self.chatBurst = chatBurst
            self.locationRate = locationRate
        }
    }

    /// Where the device's MQTT session is, while the connection ends.
    public enum SessionPhase: Sendable, Hashable {
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
    public enum State: Sendable, Hashable {
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

    /// What a received frame is, as far as the connection's state is concerned.
    public enum FrameKind: Sendable, Hashable, CaseIterable {
        /// HEARTBEAT.
        case heartbeat
        /// HELLO.
        case hello
        /// LOGIN.
        case login
        /// LOGOUT.
        case logout
        /// ACK from the device (of a DELIVERY, PUBLISH or RECEIPT_NOTICE).
        case ack
        /// Any other request: CHAT, RECEIPT, TOKEN_REFRESH, PUBLISH, SUBSCRIBE, presence and
        /// location operations.
        case other
    }

    /// Why a connection ended; also how its MQTT session is ended
    /// (``DeviceSession/end(_:)``).
    public enum CloseReason: Sendable, Hashable, CaseIterable {
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

    /// The current state.
    public internal(set) var state: State
    /// Whether a HELLO was answered (a second one is refused).
    public internal(set) var helloReceived = false
    /// The LOGIN's header, once received: LOGIN_OK and a refusal refer to it.
    public internal(set) var loginHeader: IMFrameHeader?
    /// The session id of what the gateway sends on its own (PROTOCOL.md 5.2): the LOGIN's,
    /// or before LOGIN the last frame's.
    public internal(set) var sessionID: UInt16 = 0

    let limits: Limits
    /// When LOGIN_OK is due.
    let loginDeadline: NIODeadline
    /// When the last frame arrived.
    var lastHeard: NIODeadline
    /// When the token stops being valid (its expiry plus the leeway), once logged in.
    public internal(set) var tokenDeadline: NIODeadline?
    /// Deliveries written to the device and not ACKed yet.
    public internal(set) var deliveries = PendingDeliveries()
    /// Reads held back, and why.
    public internal(set) var reading = ReadGate()

    // The data path (ConnectionStateMachine+DataPath.swift).
    /// The last sequence number of a frame the gateway sent (PROTOCOL.md 5).
    var lastSequence: UInt32 = 0
    /// What goes to the MQTT side next.
    var uplink: Uplink<PendingChat>
    /// The device's rate limits.
    var rates: DeviceRateLimits
    /// What goes to the device next.
    var downlink = Downlink()
    /// Mail that arrived before LOGIN_OK.
    var early: [ConnectionMailbox.Mail] = []
    /// The archive's side of the connection, from LOGIN_OK when there is an archive.
    var archive: ArchiveLink?

    /// A new connection, opened at `now`.
    public init(limits: Limits, now: NIODeadline) {
        self.limits = limits
        self.state = .awaitingLogin
        self.loginDeadline = now + limits.loginTimeout
        self.lastHeard = now
        self.uplink = Uplink(maxInFlight: limits.maxInFlight)
        self.rates = DeviceRateLimits(chatRate: limits.chatRate, chatBurst: limits.chatBurst, locationRate: limits.locationRate)
    }

    /// Whether LOGIN_OK was sent and the connection is not ending.
    public var isLoggedIn: Bool { self.state == .loggedIn }

    /// Whether the MQTT session is open and not being ended: logged in, or closing before
    /// the channel has closed (what the device ACKed still goes out).
    public var isSessionOpen: Bool {
        switch self.state {
        case .loggedIn, .closing(_, session: .open): true
        default: false
        }
    }

    /// The earliest moment at which ``Event/timerFired(now:)`` can change something: the
    /// handler keeps one timer armed for it. `nil` when no deadline applies.
    public var nextDeadline: NIODeadline? {
        switch self.state {
        case .awaitingLogin, .authenticating:
            return self.loginDeadline
        case .loggedIn:
            var next = self.lastHeard + self.limits.idleTimeout
            if let token = self.tokenDeadline { next = min(next, token) }
            if let oldest = self.deliveries.oldest { next = min(next, oldest + self.limits.deliveryAckTimeout) }
            if let paused = self.reading.pausedUntil { next = min(next, paused) }
            if let receipts = self.uplink.receiptDeadline { next = min(next, receipts) }
            if let archive = self.archive?.deadline { next = min(next, archive) }
            return next
        case .closing, .closed, .finished:
            return nil
        }
    }
}

extension ConnectionStateMachine {
    /// A delivery (or QoS 1 PUBLISH) was written with frame sequence `sequence` at `now`;
    /// its ACK is due within the delivery ACK timeout. `deliveryID`: the MQTT delivery it
    /// settles (none for one replayed from the archive); `offset`: its place in the user's
    /// stream.
    public mutating func deliveryWritten(
        _ sequence: UInt32, deliveryID: UInt64?, origin: PendingDeliveries.Origin?, offset: UInt64? = nil, now: NIODeadline
    ) {
        self.deliveries.insert(sequence, deliveryID: deliveryID, origin: origin, offset: offset, now: now)
    }

    /// The device ACKed the frame with `sequence`: the delivery it settles, if any.
    public mutating func deliveryAcknowledged(_ sequence: UInt32) -> PendingDeliveries.Entry? {
        self.deliveries.remove(sequence)
    }

    /// The channel asks to read: whether to read now.
    public mutating func readRequested() -> Bool { self.reading.readRequested() }

    /// The device's chat was refused RATE_LIMITED: nothing more is read from it before
    /// `until` (``Event/timerFired(now:)`` then answers ``ConnectionAction/resumeReading``).
    public mutating func rateLimited(until: NIODeadline) {
        guard self.isLoggedIn else { return }
        self.reading.pause(until: until)
    }

    /// Chat messages waiting for the broker, or the socket's writability, changed: whether
    /// a held read happens now.
    public mutating func backpressureChanged(waitingChats: Int? = nil, writable: Bool? = nil) -> Bool {
        self.reading.update(waitingChats: waitingChats, writable: writable)
    }
}
