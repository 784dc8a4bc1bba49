extension IMClient {
    /// Where and as whom to connect, and the client's timing.
    public struct Configuration: Sendable, Hashable {
        /// The gateway's host name or address. Default `127.0.0.1`.
        public var host: String
        /// The gateway's TCP port for TLV clients. Default 6969.
        public var port: Int
        /// The login token: an HS256 JWT whose `sub` claim is the user id.
        public var token: String
        /// This device's id (1–128 bytes, no `/ + #` or NUL). `nil`: the token's `device`
        /// claim, else the gateway's default. The same user and device logging in elsewhere
        /// takes the session over (this connection gets ``IMClient/Event/kicked(_:_:)``).
        public var deviceID: String?
        /// Seconds without sending before a HEARTBEAT. `nil` (default): the interval LOGIN_OK
        /// announces, else 30 s.
        public var heartbeatInterval: Duration?
        /// How long a request (chat, watch, logout, ...) waits for its ACK before it throws
        /// ``IMClientError/timeout``; also bounds the LOGIN. Default 10 s.
        public var ackTimeout: Duration
        /// How long opening the TCP connection may take. Default 10 s.
        public var connectTimeout: Duration
        /// How many received messages are remembered to drop redeliveries. Default 4096.
        public var dedupWindow: Int

        /// A configuration for `token`, with the defaults for everything else.
        public init(
            host: String = "127.0.0.1",
            port: Int = 6969,
            token: String,
            deviceID: String? = nil,
            heartbeatInterval: Duration? = nil,
            ackTimeout: Duration = .seconds(10),
            connectTimeout: Duration = .seconds(10),
            dedupWindow: Int = 4096
        ) {
            self.host = host
            self.port = port
            self.token = token
            self.deviceID = deviceID
            self.heartbeatInterval = heartbeatInterval
            self.ackTimeout = ackTimeout
            self.connectTimeout = connectTimeout
            self.dedupWindow = dedupWindow
        }

        /// The heartbeat interval used when neither the configuration nor LOGIN_OK names one.
        public static let defaultHeartbeatInterval = Duration.seconds(30)
    }

    /// The logged-in session, as LOGIN_OK described it.
    public struct Session: Sendable, Hashable {
        /// The user id (the token's `sub`).
        public var userID: String
        /// The device id in use.
        public var deviceID: String?
        /// The gateway's clock at login, Unix milliseconds.
        public var serverTime: UInt64?
        /// The heartbeat interval in use.
        public var heartbeatInterval: Duration
    }
}
