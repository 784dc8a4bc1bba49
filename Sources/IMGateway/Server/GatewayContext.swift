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
        if dropped.nonzeroBitCount == 1 {
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
