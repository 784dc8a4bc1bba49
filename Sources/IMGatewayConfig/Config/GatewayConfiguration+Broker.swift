extension GatewayConfiguration {
    /// `broker`: the MQTT v5 broker the device sessions connect to.
    public struct BrokerSettings: Codable, Sendable, Hashable {
        /// `url`: `mqtt://HOST[:PORT]` or `mqtts://HOST[:PORT]` (ports 1883 / 8883 by default).
        /// Default none: imgw starts the embedded broker (``EmbeddedBrokerSettings``).
        public var url: String?
        /// `username`: MQTT user name. Default none.
        public var username: String?
        /// `password`: MQTT password. Default none.
        public var password: String?
        /// `ca_file`: CA certificates (PEM) to verify an `mqtts` broker. Default: the system's.
        public var caFile: String?
        /// `cert_file`: client certificate (PEM) for `mqtts`. Default none.
        public var certFile: String?
        /// `key_file`: client private key (PEM) for `mqtts`. Default none.
        public var keyFile: String?
        /// `tls_insecure`: skip the broker's host name check (testing only). Default false.
        public var tlsInsecure: Bool
        /// `keepalive`: MQTT keep-alive in seconds, 5–65535. Default 30.
        public var keepalive: Int
        /// `session_expiry`: seconds the broker keeps an offline device's session and queued
        /// messages. Default 604800 (7 days).
        public var sessionExpiry: Int
        /// `max_inflight`: unacknowledged QoS 1/2 publishes per session. Default 128.
        public var maxInflight: Int
        /// `presence_probe`: a PRESENCE_WATCH (and a login, for the user's own devices) also asks
        /// the watched user's online devices for their presence, through the broker, besides
        /// reading their retained presence. It is for clusters whose nodes do not share retained
        /// messages (ejabberd 23.01); elsewhere it only costs one QoS 0 message per watched user
        /// and one per online device of it. Default true.
        public var presenceProbe: Bool
        /// `libmosquitto_internals`: whether the MQTT side may use libmosquitto 2.0's private
        /// parts (batched socket I/O, the DUP flag, the socketpair, the receive maximum, the
        /// asynchronous connect with properties; ``MosquittoLibrary/Internal``) and SwiftNIO's
        /// channel description (to mark accepted sockets close-on-exec). Each is used only where
        /// it was checked (libmosquitto 2.0.x, Linux) and has a fallback through public API
        /// alone; false turns them all off, at some cost in CPU. imgw logs at start which are
        /// in use and exports `imgw_libmosquitto_internal`. Default true.
        public var libmosquittoInternals: Bool

        /// Creates broker settings with the defaults.
        public init(
            url: String? = nil, username: String? = nil, password: String? = nil, caFile: String? = nil,
            certFile: String? = nil, keyFile: String? = nil, tlsInsecure: Bool = false, keepalive: Int = 30,
            sessionExpiry: Int = 604_800, maxInflight: Int = 128, presenceProbe: Bool = true, libmosquittoInternals: Bool = true
        ) {
            self.url = url
            self.username = username
            self.password = password
            self.caFile = caFile
            self.certFile = certFile
            self.keyFile = keyFile
            self.tlsInsecure = tlsInsecure
            self.keepalive = keepalive
            self.sessionExpiry = sessionExpiry
            self.maxInflight = maxInflight
            self.presenceProbe = presenceProbe
            self.libmosquittoInternals = libmosquittoInternals
        }

        /// `url` parsed, or `nil` when it is not set or not valid (``validate()`` reports it).
        public var parsedURL: BrokerURL? { self.url.flatMap { try? BrokerURL(parsing: $0) } }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case url, username, password
            case caFile = "ca_file"
            case certFile = "cert_file"
            case keyFile = "key_file"
            case tlsInsecure = "tls_insecure"
            case keepalive
            case sessionExpiry = "session_expiry"
            case maxInflight = "max_inflight"
            case presenceProbe = "presence_probe"
            case libmosquittoInternals = "libmosquitto_internals"
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let d = Self()
            self.url = try c.value(.url, or: d.url)
            self.username = try c.value(.username, or: d.username)
            self.password = try c.value(.password, or: d.password)
            self.caFile = try c.optionalPath(.caFile)
            self.certFile = try c.optionalPath(.certFile)
            self.keyFile = try c.optionalPath(.keyFile)
            self.tlsInsecure = try c.value(.tlsInsecure, or: d.tlsInsecure)
            self.keepalive = try c.value(.keepalive, or: d.keepalive)
            self.sessionExpiry = try c.value(.sessionExpiry, or: d.sessionExpiry)
            self.maxInflight = try c.value(.maxInflight, or: d.maxInflight)
            self.presenceProbe = try c.value(.presenceProbe, or: d.presenceProbe)
            self.libmosquittoInternals = try c.value(.libmosquittoInternals, or: d.libmosquittoInternals)
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(self.url, forKey: .url)
            try c.encode(self.username, forKey: .username)
            try c.encode(self.password, forKey: .password)
            try c.encode(self.caFile, forKey: .caFile)
            try c.encode(self.certFile, forKey: .certFile)
            try c.encode(self.keyFile, forKey: .keyFile)
            try c.encode(self.tlsInsecure, forKey: .tlsInsecure)
            try c.encode(self.keepalive, forKey: .keepalive)
            try c.encode(self.sessionExpiry, forKey: .sessionExpiry)
            try c.encode(self.maxInflight, forKey: .maxInflight)
            try c.encode(self.presenceProbe, forKey: .presenceProbe)
            try c.encode(self.libmosquittoInternals, forKey: .libmosquittoInternals)
        }
    }

    /// `embedded_broker`: the mosquitto imgw runs itself when `broker.url` is not set.
    public struct EmbeddedBrokerSettings: Codable, Sendable, Hashable {
        /// `host`: the address mosquitto listens on. Default `127.0.0.1`.
        public var host: String
        /// `port`: its port. Default 1883.
        public var port: Int
        /// `data_dir`: its configuration and persistence directory. Default
        /// ``GatewayConfiguration/defaultDataDirectory(environment:isRoot:)``.
        public var dataDir: String
        /// `executable`: the mosquitto binary. Default `/usr/sbin/mosquitto`.
        public var executable: String
        /// `max_queued_messages`: messages queued per offline session; 0 means no limit. Default 10000.
        public var maxQueuedMessages: Int

        /// Creates embedded broker settings with the defaults.
        public init(
            host: String = "127.0.0.1", port: Int = 1883, dataDir: String = GatewayConfiguration.defaultDataDirectory(),
            executable: String = "/usr/sbin/mosquitto", maxQueuedMessages: Int = 10_000
        ) {
            self.host = host
            self.port = port
            self.dataDir = dataDir
            self.executable = executable
            self.maxQueuedMessages = maxQueuedMessages
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case host, port
            case dataDir = "data_dir"
            case executable
            case maxQueuedMessages = "max_queued_messages"
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let d = Self()
            self.host = try c.value(.host, or: d.host)
            self.port = try c.value(.port, or: d.port)
            self.dataDir = try c.optionalPath(.dataDir) ?? d.dataDir
            self.executable = try c.optionalPath(.executable) ?? d.executable
            self.maxQueuedMessages = try c.value(.maxQueuedMessages, or: d.maxQueuedMessages)
        }
    }
}
