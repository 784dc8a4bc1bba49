import AsyncToolkit
import Foundation
import IMArchive
import Logging
import Mosquitto
import NIOCore
import Synchronization

/// What every connection of one gateway process shares.
final class GatewayContext: Sendable {
    let configuration: GatewayConfiguration
    let broker: BrokerEndpoint
    let topics: GatewayTopics
    let verifier: TokenVerifier
    /// Users whose older tokens are refused (the server API's revoke).
    let revocations = TokenRevocations()
    /// Signs and checks what gateways write on the broker (from `auth.jwt_secret`).
    let authenticator: MessageAuthenticator
    let mqttLoop: MosquittoEventLoop
    /// Wakes connections for mail from the MQTT loop, once per event loop and turn.
    let wakeups: MailboxWakeups
    /// `limits.max_connections_per_address` and `max_connections_awaiting_login`.
    let admissions: ConnectionAdmissions
    let registry = SessionRegistry()
    let dedup: DedupStore
    let statistics: GatewayStatistics
    /// The offline-push webhook, when `push.url` is set; ``GatewayServer/run()`` runs it.
    let push: PushNotifier?
    let shares: LocationShareDirectory
    /// The members of the groups this gateway's devices write to.
    let groups: GroupDirectory
    /// At most this many MQTT connects in progress: a login storm must not overflow the
    /// broker's listen backlog (mosquitto: 100).
    let connectGate: AsyncSemaphore
    let gatewayID: String
    let logger: Logger
    /// The message archive (`archive`), unless `store: none`.
    let archive: MessageArchive?
    /// Makes a device's MQTT session; `nil`: a ``MosquittoDeviceSession`` on the broker.
    private let sessionFactory: SessionFactory?
    /// The broker's last CONNACK to any client of this gateway, and what the gateway made of it.
    private let brokerState = Mutex<(capabilities: BrokerCapabilities, fit: BrokerFit)?>(nil)

    /// Makes the MQTT session of a device that logs in.
    typealias SessionFactory = @Sendable (_ user: String, _ device: String, _ receiptNotices: Bool) -> any DeviceSession

    init(
        configuration: GatewayConfiguration, broker: BrokerEndpoint, mqttLoop: MosquittoEventLoop, logger: Logger,
        archive: MessageArchive? = nil, sessionFactory: SessionFactory? = nil
    ) {
        self.sessionFactory = sessionFactory
        self.archive = archive
        self.configuration = configuration
        self.broker = broker
        self.topics = GatewayTopics(prefix: configuration.topicPrefix, pubsubSpace: configuration.pubsub.topicSpace)
        self.authenticator = MessageAuthenticator(secret: configuration.auth.jwtSecret)
        self.verifier = TokenVerifier(secret: configuration.auth.jwtSecret, issuer: configuration.auth.issuer, leeway: configuration.auth.leeway)
        self.mqttLoop = mqttLoop
        self.wakeups = MailboxWakeups(mqttLoop: mqttLoop)
        self.admissions = ConnectionAdmissions(configuration.limits)
        self.gatewayID = configuration.gatewayID
        self.dedup = DedupStore()
        self.shares = LocationShareDirectory(maxDuration: Double(configuration.location.maxShareDuration))
        self.groups = GroupDirectory(topics: configuration.topics, capacity: configuration.groups.cache, archive: archive)
        self.connectGate = AsyncSemaphore(limit: 64)
        self.logger = logger
        let statistics = GatewayStatistics()
        self.statistics = statistics
        self.push = configuration.push.enabled
            ? PushNotifier(configuration: configuration, broker: broker, loop: mqttLoop, statistics: statistics.push, logger: logger)
            : nil
    }

    /// A CONNACK of one of this gateway's clients: what the gateway makes of the broker. Logged
    /// when it differs from the last one (the first, and after a broker's reconfiguration):
    /// an error when imgw cannot work there, a notice per adaptation. `persistent`: the client
    /// asked for `broker.session_expiry` (a device session); a broker answers with its own
    /// session expiry only when it is smaller than the one asked, so a clean client's CONNACK
    /// says nothing about it and the last device session's value stands.
    @discardableResult
    func brokerAnnounced(_ capabilities: BrokerCapabilities, persistent: Bool) -> BrokerFit {
        let known = brokerState.withLock { $0 }
        var capabilities = capabilities
        if !persistent { capabilities.sessionExpiryInterval = known?.capabilities.sessionExpiryInterval }
        // Every login's CONNACK comes here: the same announcement costs a comparison.
        if let known, known.capabilities == capabilities { return known.fit }
        let fit = BrokerFit(capabilities, broker: configuration.broker)
        let changed = brokerState.withLock { state in
            defer { state = (capabilities, fit) }
            return state?.fit != fit
        }
        if changed {
            if !fit.isUsable { logger.error("\(fit.refusal); logins are refused", metadata: ["broker": "\(broker)"]) }
            for note in fit.notes { logger.notice("\(note)", metadata: ["broker": "\(broker)"]) }
        }
        return fit
    }

    /// What the broker's last CONNACK made of it; nil before the first.
    var brokerFit: BrokerFit? { brokerState.withLock { $0?.fit } }

    /// Whether `message`, on a topic only gateways write (a chat, receipt, share or position),
    /// was written by one (``MessageAuthenticator``). One that was not is counted and logged
    /// (the 1st, 2nd, 4th, 8th, ...). An empty payload, which clears a retained message,
    /// carries nothing to forge.
    func isFromAGateway(_ message: MosquittoMessage) -> Bool {
        if message.payload.isEmpty || authenticator.isAuthentic(message) { return true }
        let dropped = statistics.forgedMessages.add(1, ordering: .relaxed).newValue
        if dropped.isPowerOfTwo {
            logger.warning(
                "dropped a message that no gateway wrote (no valid tag): is something else writing to the broker?",
                metadata: ["topic": "\(message.topic)", "dropped": "\(dropped)"])
        }
        return false
    }

    /// The MQTT session of a device that logs in.
    func makeSession(user: String, device: String, receiptNotices: Bool) -> any DeviceSession {
        if let sessionFactory { return sessionFactory(user, device, receiptNotices) }
        return MosquittoDeviceSession(user: user, device: device, receiptNotices: receiptNotices, context: self)
    }
}

/// Counters for the stats topic and metrics.
final class GatewayStatistics: Sendable {
    /// When the gateway started.
    let started = ContinuousClock.now
    /// Open TLV connections, counted until their MQTT session has ended too (shutdown
    /// waits for the last one).
    let connections = ConnectionTracker()
    /// Chat messages refused RATE_LIMITED (``GatewayConfiguration/LimitSettings/chatRate``).
    let chatRateLimited = Atomic<Int>(0)
    /// Chat deliveries replayed from the archive (catching devices up).
    let caughtUp = Atomic<Int>(0)
    /// Messages dropped because no gateway wrote them (``GatewayContext/isFromAGateway(_:)``).
    let forgedMessages = Atomic<Int>(0)
    /// Device sessions the broker ended because their queue was full (DISCONNECT 0x97 Quota
    /// exceeded: ejabberd's max_queue); what it held for the device is lost.
    let brokerQuotaDisconnects = Atomic<Int>(0)
    /// The offline-push webhook's counters.
    let push = PushStatistics()
    /// Chat messages accepted from the server API.
    let apiMessagesIn = Atomic<Int>(0)
    private let tcp = TransportCounters()
    private let websocket = TransportCounters()

    /// The counts of `transport`'s devices.
    func transport(_ transport: DeviceTransport) -> TransportCounters {
        switch transport {
        case .tcp: tcp
        case .websocket: websocket
        }
    }

    /// Logged-in devices, every transport.
    var loggedIn: Int { sum { $0.loggedIn.load(ordering: .relaxed) } }
    /// Chat messages accepted from devices and the server API.
    var messagesIn: Int { sum { $0.messagesIn.load(ordering: .relaxed) } + apiMessagesIn.load(ordering: .relaxed) }
    /// Messages written to devices.
    var messagesOut: Int { sum { $0.messagesOut.load(ordering: .relaxed) } }

    private func sum(_ count: (TransportCounters) -> Int) -> Int {
        count(tcp) + count(websocket)
    }

    /// The chat path's latencies of the last ten seconds: from a chat taken from a device to
    /// its ACK (stored, published, the broker's PUBACK).
    private let chatLatency = Mutex(LatencyWindow())

    /// A chat taken at `start` was ACKed at `now`.
    func chatAcknowledged(since start: NIODeadline, now: NIODeadline) {
        let microseconds = UInt64(max(0, (now - start).nanoseconds / 1000))
        let second = Int64(now.uptimeNanoseconds / 1_000_000_000)
        chatLatency.withLock { $0.record(microseconds: microseconds, second: second) }
    }

    /// The p99 of the chat path over the last ten seconds, in milliseconds; nil without a chat.
    func chatLatencyP99() -> Double? {
        let second = Int64(NIODeadline.now().uptimeNanoseconds / 1_000_000_000)
        return chatLatency.withLock { $0.percentile(0.99, second: second) }.map { Double($0) / 1000 }
    }
}

/// The offline-push webhook's counters (``PushNotifier``).
final class PushStatistics: Sendable {
    /// Notifications waiting or in flight.
    let queued = Atomic<Int>(0)
    /// Notifications the webhook answered with 2xx.
    let delivered = Atomic<Int>(0)
    /// Notifications queued and then not sent because a device of the recipient had come
    /// online (a chat for a user online when it is accepted makes no notification at all).
    let suppressed = Atomic<Int>(0)
    /// POSTs that failed and will be made again.
    let retries = Atomic<Int>(0)
    /// Notifications given up: out of attempts, or refused by the webhook.
    let failed = Atomic<Int>(0)
    /// Notifications dropped because the queue was full.
    let dropped = Atomic<Int>(0)
}

/// Message ids each user's devices already had accepted (PROTOCOL.md 6.3: a resend of an
/// accepted id is ACKed without publishing again; an id reused for another message is
/// refused). One per gateway process, keyed by user: every device of the user logged in on
/// this process shares it, devices on other gateways do not. A lock, not an actor: checked
/// and recorded for every chat message, it must not cost two task hops each.
final class DedupStore: Sendable {
    private let window = Mutex(DedupWindow())

    /// What an earlier acceptance of `id` from `user`, if any, says of the message with
    /// `fingerprint`; a duplicate always carries a server time.
    func check(user: String, id: String, fingerprint: ChatFingerprint) -> DedupDecision {
        let now = Date.now.timeIntervalSince1970
        switch window.withLock({ $0.check(sender: user, id: id, fingerprint: fingerprint, now: now) }) {
        case .duplicate(nil): return .duplicate(serverTime: unixMilliseconds())
        case let decision: return decision
        }
    }

    func record(user: String, id: String, fingerprint: ChatFingerprint, serverTime: UInt64) {
        let now = Date.now.timeIntervalSince1970
        window.withLock { $0.record(sender: user, id: id, fingerprint: fingerprint, serverTime: serverTime, now: now) }
    }
}

/// The connections logged in on this process, by user and device, for session takeover.
actor SessionRegistry {
    private var sessions: [String: Entry] = [:]

    struct Entry: Sendable {
        let id: UInt64
        /// When the token the device logged in with was issued (Unix seconds), if it says.
        let issuedAt: Int64?
        /// Makes the connection end the way the reason says (a newer login of the device, the
        /// backend's disconnect): KICK, close, end the MQTT side; returns once it has.
        let end: @Sendable (ConnectionStateMachine.LeaveReason) async -> Void
    }

    private var nextID: UInt64 = 0

    /// Registers a new login; an older connection of the same device is told to leave
    /// first (it sends a KICK and closes) and awaited. Returns the registration id.
    func register(
        user: String, device: String, issuedAt: Int64?, end: @escaping @Sendable (ConnectionStateMachine.LeaveReason) async -> Void
    ) async -> UInt64 {
        nextID += 1
        let id = nextID
        let key = user + "/" + device
        let previous = sessions[key]
        sessions[key] = Entry(id: id, issuedAt: issuedAt, end: end)
        if let previous { await previous.end(.takenOver) }
        return id
    }

    /// Forgets a registration (if still current).
    func unregister(user: String, device: String, id: UInt64) {
        let key = user + "/" + device
        if sessions[key]?.id == id { sessions[key] = nil }
    }

    /// The sessions of `user` on this gateway (of `device` only, if given), with their device
    /// ids. Looks at every session: for the rare disconnects and revocations.
    func sessions(of user: String, device: String? = nil) -> [(device: String, entry: Entry)] {
        if let device { return sessions[user + "/" + device].map { [(device, $0)] } ?? [] }
        let prefix = user + "/"
        return sessions.compactMap { key, entry in key.hasPrefix(prefix) ? (String(key.dropFirst(prefix.count)), entry) : nil }
    }

    var count: Int { sessions.count }
}

extension Int {
    /// 1, 2, 4, 8, ...: for logging the first of a series of events, then ever more rarely.
    var isPowerOfTwo: Bool { self > 0 && (self & (self - 1)) == 0 }
}
