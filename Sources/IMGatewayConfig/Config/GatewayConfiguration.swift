import Foundation

/// The gateway's settings, read from a YAML file (`config/imgw.yaml` documents every key).
///
/// Every key is optional: what the file leaves out keeps its default (``defaults``). Keys are
/// snake_case in YAML and camelCase here; an unknown key is an error naming it, so a typo
/// cannot silently fall back to a default. Times are whole seconds unless a key says otherwise.
///
/// | Key | Default |
/// |---|---|
/// | `gateway_id` | the host name (`imgw` if that is not a valid id) |
/// | `topic_prefix` | `im` |
/// | `listen` | ``ListenSettings``: `host` 127.0.0.1, `port` 6969, `tls` none |
/// | `broker` | ``BrokerSettings``: `url` none (embedded broker), `keepalive` 30, `session_expiry` 604800, `max_inflight` 128, `presence_probe` true, `libmosquitto_internals` true |
/// | `embedded_broker` | ``EmbeddedBrokerSettings``: 127.0.0.1:1883, `data_dir`, `executable` /usr/sbin/mosquitto, `max_queued_messages` 10000 |
/// | `auth` | ``AuthSettings``: `jwt_secret` change-me-in-production (a warning), `issuer` none, `leeway` 30 |
/// | `limits` | ``LimitSettings``: body 1 MiB, login 10 s, idle 90 s, delivery ACK 30 s, 64 unacked, compression from 1024 bytes |
/// | `location` | ``LocationSettings``: 1 update/s, retain 3600 s, shares up to 86400 s |
/// | `pubsub` | ``PubSubSettings``: space `t`, publish and subscribe allowed, QoS up to 2 |
/// | `stats_interval` | 10 (0: no stats) |
/// | `metrics` | ``MetricsSettings``: 127.0.0.1:9469, enabled |
/// | `api` | ``APISettings``: 127.0.0.1:9470, no keys (off), `system_sender` system |
/// | `groups` | ``GroupSettings``: 1,000 members at most, 10,000 groups followed per gateway |
/// | `push` | ``PushSettings``: no URL (off), no preview, 250 ms delay, 6 attempts, queue 10,000 |
/// | `archive` | ``ArchiveSettings``: SQLite beside the embedded broker's data, `sync` normal, 30 days' retention |
/// | `log_level` | `info` |
public struct GatewayConfiguration: Codable, Sendable, Hashable {
    /// `gateway_id`: names this gateway in presence payloads and the stats topic; a valid ``IMIdentifier``.
    public var gatewayID: String
    /// `topic_prefix`: the first level of every MQTT topic (one level, no wildcards, no `$`).
    public var topicPrefix: String
    /// `listen`: where TLV clients connect.
    public var listen: ListenSettings
    /// `broker`: the MQTT broker to use; without `url`, the embedded one.
    public var broker: BrokerSettings
    /// `embedded_broker`: the mosquitto imgw starts when `broker.url` is not set.
    public var embeddedBroker: EmbeddedBrokerSettings
    /// `auth`: login token verification.
    public var auth: AuthSettings
    /// `limits`: per-connection limits and timeouts.
    public var limits: LimitSettings
    /// `location`: location sharing.
    public var location: LocationSettings
    /// `pubsub`: clients' generic publish/subscribe.
    public var pubsub: PubSubSettings
    /// `stats_interval`: seconds between stats publications; 0 turns them off.
    public var statsInterval: Int
    /// `metrics`: the Prometheus endpoint.
    public var metrics: MetricsSettings
    /// `api`: the server API for the app backend.
    public var api: APISettings
    /// `groups`: group chat.
    public var groups: GroupSettings
    /// `push`: the offline-push webhook.
    public var push: PushSettings
    /// `archive`: the message archive.
    public var archive: ArchiveSettings
    /// `log_level`: trace, debug, info, notice, warning, error or critical.
    public var logLevel: String

    /// Creates a configuration; every argument defaults to its documented default.
    public init(
        gatewayID: String = GatewayConfiguration.defaultGatewayID(),
        topicPrefix: String = "im",
        listen: ListenSettings = ListenSettings(),
        broker: BrokerSettings = BrokerSettings(),
        embeddedBroker: EmbeddedBrokerSettings = EmbeddedBrokerSettings(),
        auth: AuthSettings = AuthSettings(),
        limits: LimitSettings = LimitSettings(),
        location: LocationSettings = LocationSettings(),
        pubsub: PubSubSettings = PubSubSettings(),
        statsInterval: Int = 10,
        metrics: MetricsSettings = MetricsSettings(),
        api: APISettings = APISettings(),
        groups: GroupSettings = GroupSettings(),
        push: PushSettings = PushSettings(),
        archive: ArchiveSettings = ArchiveSettings(),
        logLevel: String = "info"
    ) {
        self.gatewayID = gatewayID
        self.topicPrefix = topicPrefix
        self.listen = listen
        self.broker = broker
        self.embeddedBroker = embeddedBroker
        self.auth = auth
        self.limits = limits
        self.location = location
        self.pubsub = pubsub
        self.statsInterval = statsInterval
        self.metrics = metrics
        self.api = api
        self.groups = groups
        self.push = push
        self.archive = archive
        self.logLevel = logLevel
    }

    /// The configuration of an empty file.
    public static let defaults = GatewayConfiguration()

    /// The topic scheme of this configuration.
    public var topics: GatewayTopics { GatewayTopics(prefix: self.topicPrefix, pubsubSpace: self.pubsub.topicSpace) }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case gatewayID = "gateway_id"
        case topicPrefix = "topic_prefix"
        case listen, broker
        case embeddedBroker = "embedded_broker"
        case auth, limits, location, pubsub
        case statsInterval = "stats_interval"
        case metrics, api, groups, push, archive
        case logLevel = "log_level"
    }

    public init(from decoder: any Decoder) throws {
        try decoder.rejectUnknownKeys(CodingKeys.self)
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let d = GatewayConfiguration.defaults
        self.gatewayID = try c.value(.gatewayID, or: d.gatewayID)
        self.topicPrefix = try c.value(.topicPrefix, or: d.topicPrefix)
        self.listen = try c.value(.listen, or: d.listen)
        self.broker = try c.value(.broker, or: d.broker)
        self.embeddedBroker = try c.value(.embeddedBroker, or: d.embeddedBroker)
        self.auth = try c.value(.auth, or: d.auth)
        self.limits = try c.value(.limits, or: d.limits)
        self.location = try c.value(.location, or: d.location)
        self.pubsub = try c.value(.pubsub, or: d.pubsub)
        self.statsInterval = try c.value(.statsInterval, or: d.statsInterval)
        self.metrics = try c.value(.metrics, or: d.metrics)
        self.api = try c.value(.api, or: d.api)
        self.groups = try c.value(.groups, or: d.groups)
        self.push = try c.value(.push, or: d.push)
        self.archive = try c.value(.archive, or: d.archive)
        self.logLevel = try c.value(.logLevel, or: d.logLevel)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(self.gatewayID, forKey: .gatewayID)
        try c.encode(self.topicPrefix, forKey: .topicPrefix)
        try c.encode(self.listen, forKey: .listen)
        try c.encode(self.broker, forKey: .broker)
        try c.encode(self.embeddedBroker, forKey: .embeddedBroker)
        try c.encode(self.auth, forKey: .auth)
        try c.encode(self.limits, forKey: .limits)
        try c.encode(self.location, forKey: .location)
        try c.encode(self.pubsub, forKey: .pubsub)
        try c.encode(self.statsInterval, forKey: .statsInterval)
        try c.encode(self.metrics, forKey: .metrics)
        try c.encode(self.api, forKey: .api)
        try c.encode(self.groups, forKey: .groups)
        try c.encode(self.push, forKey: .push)
        try c.encode(self.archive, forKey: .archive)
        try c.encode(self.logLevel, forKey: .logLevel)
    }
}

extension GatewayConfiguration {
    /// The host name if it is a valid ``IMIdentifier``, else `imgw`.
    public static func defaultGatewayID() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "imgw" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return IMIdentifier.isValid(name) ? name : "imgw"
    }

    /// The embedded broker's default data directory: `/var/lib/imgw/broker` for root, else
    /// `$XDG_STATE_HOME/imgw/broker`, else `$HOME/.local/state/imgw/broker`.
    public static func defaultDataDirectory(
        environment: [String: String] = ProcessInfo.processInfo.environment,
        isRoot: Bool = geteuid() == 0
    ) -> String {
        if isRoot { return "/var/lib/imgw/broker" }
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return "\(state)/imgw/broker" }
        if let home = environment["HOME"], !home.isEmpty { return "\(home)/.local/state/imgw/broker" }
        return "/var/lib/imgw/broker"
    }
}
