extension GatewayConfiguration {
    /// `listen`: where TLV clients connect.
    public struct ListenSettings: Codable, Sendable, Hashable {
        /// `host`: the address to bind. Default `127.0.0.1`.
        public var host: String
        /// `port`: the TCP port; 0 picks a free one. Default 6969.
        public var port: Int
        /// `tls`: serve TLS with this certificate and key. Default none (plain TCP).
        public var tls: TLSSettings?
        /// `threads`: event-loop threads serving TLV connections; 0 (the default) is one per
        /// core less one, at least one, because the MQTT sessions run on a thread of their
        /// own. Read by `imgw serve` at start.
        public var threads: Int
        /// `websocket`: TLV clients over WebSocket (browsers), with this listener's TLS. Default off.
        public var websocket: WebSocketSettings

        /// Creates listen settings with the defaults.
        public init(host: String = "127.0.0.1", port: Int = 6969, tls: TLSSettings? = nil, threads: Int = 0, websocket: WebSocketSettings = .init()) {
            self.host = host
            self.port = port
            self.tls = tls
            self.threads = threads
            self.websocket = websocket
        }

        /// The event-loop threads to run: ``threads``, or for 0 one per core less one (at
        /// least one).
        public func eventLoopThreads(cores: Int) -> Int {
            threads > 0 ? threads : max(1, cores - 1)
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case host, port, tls, threads, websocket
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let d = Self()
            self.host = try c.value(.host, or: d.host)
            self.port = try c.value(.port, or: d.port)
            self.tls = try c.value(.tls, or: d.tls)
            self.threads = try c.value(.threads, or: d.threads)
            self.websocket = try c.value(.websocket, or: d.websocket)
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(self.host, forKey: .host)
            try c.encode(self.port, forKey: .port)
            try c.encode(self.tls, forKey: .tls)
            try c.encode(self.threads, forKey: .threads)
            try c.encode(self.websocket, forKey: .websocket)
        }
    }

    /// `listen.tls`: a certificate chain and its private key, PEM files.
    public struct TLSSettings: Codable, Sendable, Hashable {
        /// `cert_file`: the certificate chain (PEM).
        public var certFile: String
        /// `key_file`: the private key (PEM).
        public var keyFile: String

        /// Creates TLS settings.
        public init(certFile: String, keyFile: String) {
            self.certFile = certFile
            self.keyFile = keyFile
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case certFile = "cert_file"
            case keyFile = "key_file"
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            self.certFile = try c.path(.certFile)
            self.keyFile = try c.path(.keyFile)
        }
    }

    /// `metrics`: the Prometheus text endpoint (`GET /metrics`).
    public struct MetricsSettings: Codable, Sendable, Hashable {
        /// `host`: the address to bind. Default `127.0.0.1`.
        public var host: String
        /// `port`: the TCP port; 0 picks a free one. Default 9469.
        public var port: Int
        /// `enabled`: whether to serve metrics. Default true.
        public var enabled: Bool

        /// Creates metrics settings with the defaults.
        public init(host: String = "127.0.0.1", port: Int = 9469, enabled: Bool = true) {
            self.host = host
            self.port = port
            self.enabled = enabled
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case host, port, enabled
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let d = Self()
            self.host = try c.value(.host, or: d.host)
            self.port = try c.value(.port, or: d.port)
            self.enabled = try c.value(.enabled, or: d.enabled)
        }
    }
}

extension GatewayConfiguration {
    /// `api`: the server API for the app backend (docs/api/openapi.yaml), served only when
    /// `keys` holds at least one key.
    public struct APISettings: Codable, Sendable, Hashable {
        /// `host`: the address to bind. Default `127.0.0.1`.
        public var host: String
        /// `port`: the TCP port; 0 picks a free one. Default 9470.
        public var port: Int
        /// `keys`: who may call the API, each a name (in the log) and a bearer key.
        public var keys: [APIKey]
        /// `system_sender`: the sender of a message sent without `from`. Default `system`,
        /// which the app then must not give to a user.
        public var systemSender: String
        /// `revocation_retention`: seconds a token revocation stays on the broker; longer than
        /// any token lives. Default 2,592,000 (30 days).
        public var revocationRetention: Int

        /// Creates API settings with the defaults (no keys: off).
        public init(
            host: String = "127.0.0.1", port: Int = 9470, keys: [APIKey] = [], systemSender: String = "system",
            revocationRetention: Int = 2_592_000
        ) {
            self.host = host
            self.port = port
            self.keys = keys
            self.systemSender = systemSender
            self.revocationRetention = revocationRetention
        }

        /// Whether the API is served.
        public var enabled: Bool { !keys.isEmpty }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case host, port, keys
            case systemSender = "system_sender"
            case revocationRetention = "revocation_retention"
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let d = Self()
            self.host = try c.value(.host, or: d.host)
            self.port = try c.value(.port, or: d.port)
            self.keys = try c.value(.keys, or: d.keys)
            self.systemSender = try c.value(.systemSender, or: d.systemSender)
            self.revocationRetention = try c.value(.revocationRetention, or: d.revocationRetention)
        }
    }

    /// One API key: `name` (for the log) and `key` (the bearer token; at least 32 bytes).
    public struct APIKey: Codable, Sendable, Hashable, CustomStringConvertible {
        /// `name`: who holds the key, as the log names them.
        public var name: String
        /// `key`: the secret the caller sends as `Authorization: Bearer KEY`.
        public var key: String

        /// Creates a key.
        public init(name: String, key: String) {
            self.name = name
            self.key = key
        }

        /// The name only: a key never goes into a log line or a message.
        public var description: String { "API key \(name)" }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case name, key
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            self.name = try c.decode(String.self, forKey: .name)
            self.key = try c.decode(String.self, forKey: .key)
        }
    }
}
