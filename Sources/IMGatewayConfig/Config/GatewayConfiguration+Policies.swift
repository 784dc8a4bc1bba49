extension GatewayConfiguration {
    /// `auth`: how LOGIN tokens (HS256 JWTs) are verified.
    public struct AuthSettings: Codable, Sendable, Hashable {
        /// The built-in secret; ``GatewayConfiguration/warnings()`` warns while it is in use.
        public static let insecureDefaultSecret = "change-me-in-production"

        /// `jwt_secret`: the HMAC secret shared with the token issuer. Default
        /// `change-me-in-production` (warned about).
        public var jwtSecret: String
        /// `issuer`: the required `iss` claim. Default none (any issuer).
        public var issuer: String?
        /// `leeway`: seconds of clock skew tolerated on `exp` and `nbf`. Default 30.
        public var leeway: Int

        /// Creates auth settings with the defaults.
        public init(jwtSecret: String = AuthSettings.insecureDefaultSecret, issuer: String? = nil, leeway: Int = 30) {
            self.jwtSecret = jwtSecret
            self.issuer = issuer
            self.leeway = leeway
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case jwtSecret = "jwt_secret"
            case issuer, leeway
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let d = Self()
            self.jwtSecret = try c.value(.jwtSecret, or: d.jwtSecret)
            self.issuer = try c.value(.issuer, or: d.issuer)
            self.leeway = try c.value(.leeway, or: d.leeway)
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(self.jwtSecret, forKey: .jwtSecret)
            try c.encode(self.issuer, forKey: .issuer)
            try c.encode(self.leeway, forKey: .leeway)
        }
    }

    /// `limits`: per-connection limits and timeouts.
    public struct LimitSettings: Codable, Sendable, Hashable {
        /// `max_body_length`: largest frame body, transmitted or inflated, 16 KiB–10 MiB. Default 1048576.
        public var maxBodyLength: Int
        /// `login_timeout`: seconds from connect to LOGIN before LOGIN_TIMEOUT. Default 10.
        public var loginTimeout: Int
        /// `idle_timeout`: seconds without any frame before IDLE_TIMEOUT; LOGIN_OK announces a
        /// heartbeat interval of a third of it. Default 90.
        public var idleTimeout: Int
        /// `delivery_ack_timeout`: seconds a device has to ACK a delivery. Default 30.
        public var deliveryAckTimeout: Int
        /// `max_unacked_deliveries`: deliveries written to a device and not yet ACKed. Default 64.
        public var maxUnackedDeliveries: Int
        /// `compression_threshold`: bodies from this many bytes are compressed for devices that
        /// accept zlib. Default 1024.
        public var compressionThreshold: Int
        /// `chat_rate`: chat messages per second one connection may send (a token bucket); 0 =
        /// no limit. Past it CHAT gets RATE_LIMITED with RETRY_AFTER. Default 2000.
        public var chatRate: Double
        /// `chat_burst`: chat messages a connection may send back to back. Default 2000.
        public var chatBurst: Int
        /// `max_subscriptions`: pub/sub filters one device may hold. Default 100.
        public var maxSubscriptions: Int
        /// `max_watches`: users one device may watch, presence and location together.
        /// Default 1000.
        public var maxWatches: Int
        /// `max_connections_per_address`: open TLV connections from one source address; 0 =
        /// no limit (behind a proxy that hides client addresses). Default 1000.
        public var maxConnectionsPerAddress: Int
        /// `max_connections_awaiting_login`: connections that have not logged in yet, over
        /// all addresses; 0 = no limit. Default 1000.
        public var maxConnectionsAwaitingLogin: Int

        /// Creates limits with the defaults.
        public init(
            maxBodyLength: Int = 1_048_576, loginTimeout: Int = 10, idleTimeout: Int = 90, deliveryAckTimeout: Int = 30,
            maxUnackedDeliveries: Int = 64, compressionThreshold: Int = 1024, chatRate: Double = 2000, chatBurst: Int = 2000,
            maxSubscriptions: Int = 100, maxWatches: Int = 1000, maxConnectionsPerAddress: Int = 1000,
            maxConnectionsAwaitingLogin: Int = 1000
        ) {
            self.maxBodyLength = maxBodyLength
            self.loginTimeout = loginTimeout
            self.idleTimeout = idleTimeout
            self.deliveryAckTimeout = deliveryAckTimeout
            self.maxUnackedDeliveries = maxUnackedDeliveries
            self.compressionThreshold = compressionThreshold
            self.chatRate = chatRate
            self.chatBurst = chatBurst
            self.maxSubscriptions = maxSubscriptions
            self.maxWatches = maxWatches
            self.maxConnectionsPerAddress = maxConnectionsPerAddress
            self.maxConnectionsAwaitingLogin = maxConnectionsAwaitingLogin
        }

        /// The HEARTBEAT_INTERVAL announced in LOGIN_OK: a third of `idle_timeout` (the gateway
        /// closes after three silent intervals), at least 1.
        public var heartbeatInterval: Int { max(1, self.idleTimeout / 3) }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case maxBodyLength = "max_body_length"
            case loginTimeout = "login_timeout"
            case idleTimeout = "idle_timeout"
            case deliveryAckTimeout = "delivery_ack_timeout"
            case maxUnackedDeliveries = "max_unacked_deliveries"
            case compressionThreshold = "compression_threshold"
            case chatRate = "chat_rate"
            case chatBurst = "chat_burst"
            case maxSubscriptions = "max_subscriptions"
            case maxWatches = "max_watches"
            case maxConnectionsPerAddress = "max_connections_per_address"
            case maxConnectionsAwaitingLogin = "max_connections_awaiting_login"
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let d = Self()
            self.maxBodyLength = try c.value(.maxBodyLength, or: d.maxBodyLength)
            self.loginTimeout = try c.value(.loginTimeout, or: d.loginTimeout)
            self.idleTimeout = try c.value(.idleTimeout, or: d.idleTimeout)
            self.deliveryAckTimeout = try c.value(.deliveryAckTimeout, or: d.deliveryAckTimeout)
            self.maxUnackedDeliveries = try c.value(.maxUnackedDeliveries, or: d.maxUnackedDeliveries)
            self.compressionThreshold = try c.value(.compressionThreshold, or: d.compressionThreshold)
            self.chatRate = try c.value(.chatRate, or: d.chatRate)
            self.chatBurst = try c.value(.chatBurst, or: d.chatBurst)
            self.maxSubscriptions = try c.value(.maxSubscriptions, or: d.maxSubscriptions)
            self.maxWatches = try c.value(.maxWatches, or: d.maxWatches)
            self.maxConnectionsPerAddress = try c.value(.maxConnectionsPerAddress, or: d.maxConnectionsPerAddress)
            self.maxConnectionsAwaitingLogin = try c.value(.maxConnectionsAwaitingLogin, or: d.maxConnectionsAwaitingLogin)
        }
    }

    /// `location`: location sharing.
    public struct LocationSettings: Codable, Sendable, Hashable {
        /// `max_updates_per_second`: LOCATION_UPDATE rate per device (token bucket). Default 1.0.
        public var maxUpdatesPerSecond: Double
        /// `retain_expiry`: seconds the last position stays retained at most. Default 3600.
        public var retainExpiry: Int
        /// `max_share_duration`: longest share; longer DURATIONs are shortened. Default 86400.
        public var maxShareDuration: Int

        /// Creates location settings with the defaults.
        public init(maxUpdatesPerSecond: Double = 1.0, retainExpiry: Int = 3600, maxShareDuration: Int = 86_400) {
            self.maxUpdatesPerSecond = maxUpdatesPerSecond
            self.retainExpiry = retainExpiry
            self.maxShareDuration = maxShareDuration
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case maxUpdatesPerSecond = "max_updates_per_second"
            case retainExpiry = "retain_expiry"
            case maxShareDuration = "max_share_duration"
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let d = Self()
            self.maxUpdatesPerSecond = try c.value(.maxUpdatesPerSecond, or: d.maxUpdatesPerSecond)
            self.retainExpiry = try c.value(.retainExpiry, or: d.retainExpiry)
            self.maxShareDuration = try c.value(.maxShareDuration, or: d.maxShareDuration)
        }
    }

    /// `pubsub`: clients' generic publish/subscribe under `{topic_prefix}/{topic_space}/`.
    public struct PubSubSettings: Codable, Sendable, Hashable {
        /// `topic_space`: the level below the prefix holding clients' topics (not `u`). Default `t`.
        public var topicSpace: String
        /// `allow_publish`: whether clients may PUBLISH. Default true.
        public var allowPublish: Bool
        /// `allow_subscribe`: whether clients may SUBSCRIBE. Default true.
        public var allowSubscribe: Bool
        /// `max_qos`: the highest QoS of a device's PUBLISH, 0–2, and of a subscription
        /// (granted at most 1 whatever this says: deliveries to devices are at least once).
        /// Default 2.
        public var maxQoS: Int

        /// Creates pub/sub settings with the defaults.
        public init(topicSpace: String = "t", allowPublish: Bool = true, allowSubscribe: Bool = true, maxQoS: Int = 2) {
            self.topicSpace = topicSpace
            self.allowPublish = allowPublish
            self.allowSubscribe = allowSubscribe
            self.maxQoS = maxQoS
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case topicSpace = "topic_space"
            case allowPublish = "allow_publish"
            case allowSubscribe = "allow_subscribe"
            case maxQoS = "max_qos"
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let d = Self()
            self.topicSpace = try c.value(.topicSpace, or: d.topicSpace)
            self.allowPublish = try c.value(.allowPublish, or: d.allowPublish)
            self.allowSubscribe = try c.value(.allowSubscribe, or: d.allowSubscribe)
            self.maxQoS = try c.value(.maxQoS, or: d.maxQoS)
        }
    }
}
