import NIOSSL

extension IMClient {
    /// Where and as whom to connect, and the client's timing and reliability settings.
    public struct Configuration: Sendable {
        /// The gateway's host name or address. Default `127.0.0.1`.
        public var host: String
        /// The gateway's TCP port for TLV clients. Default 6969.
        public var port: Int
        /// The login token: an HS256 JWT whose `sub` claim is the user id.
        public var token: String
        /// This device's id (1–64 bytes, no `/ + # $` or NUL). `nil`: the token's `device`
        /// claim, else the gateway's default. The same user and device logging in elsewhere
        /// takes the session over (this client gets ``IMClient/Event/kicked(_:_:)`` and stops).
        public var deviceID: String?
        /// TLS to the gateway's TLS listener (`tls.*` in imgw.yaml); `nil` (default): plain TCP.
        /// Build one with `TLSConfiguration.makeClientConfiguration()`, add the gateway's CA
        /// to `trustRoots` if it is not publicly trusted.
        public var tls: TLSConfiguration?
        /// The name the gateway's certificate must carry; `nil`: ``host``.
        public var tlsServerName: String?

        /// The adaptive heartbeat's bounds (seed 003). `maxInterval` is lowered to the
        /// interval LOGIN_OK announces: the gateway closes a connection silent for three.
        public var heartbeat: AdaptiveHeartbeat.Configuration
        /// Foreground (the app is in use) or background; change it with
        /// ``IMClient/setAppMode(_:)``.
        public var appMode: AdaptiveHeartbeat.Mode

        /// How long a request waits for its ACK on one connection before it is written
        /// again (with RESEND for chat). After ``Configuration/maxRetransmits`` overdue ACKs
        /// the connection is treated as broken. Default 10 s (the gateway ACKs chat only
        /// once its broker has it).
        public var ackTimeout: Duration
        /// Retransmissions of one request on one connection before the connection is
        /// treated as broken and a new one is made. Default 3.
        public var maxRetransmits: Int
        /// How long ``IMClient/send(to:text:messageID:)`` and other durable requests may take
        /// in all, across retransmissions and reconnects, before they throw
        /// ``IMClientError/timeout`` and leave the outbox. `nil`: until the client is closed.
        /// Default 2 minutes.
        public var sendTimeout: Duration?
        /// How long opening TCP (and TLS) and logging in may take. Default 10 s.
        public var connectTimeout: Duration
        /// The path of the gateway's WebSocket listener (`listen.websocket.path`, e.g. `/im`):
        /// set, the client reaches `host:port` over WebSocket (``WebSocketTransport``); `nil`
        /// (the default), over TCP.
        public var webSocketPath: String? = nil
        /// Reconnect after a lost connection (default `true`), with ``backoff``. Never after
        /// ``IMClient/logout()``, ``IMClient/close()``, a refused login or KICK
        /// SESSION_TAKEN_OVER. `false`: a lost connection ends the client
        /// (``IMClient/Event/disconnected``).
        public var reconnect: Bool
        /// The reconnect delays: seed 003's levels (0-1], (1-2], (2-4] ... (16-32] s.
        public var backoff: ReconnectBackoff
        /// Requests written and not yet ACKed, at most. Default 64.
        public var maxInFlight: Int
        /// Where chat messages, receipts and QoS ≥ 1 publishes wait for their ACK beyond
        /// memory (an app's database); entries found there are sent again at connect.
        /// `nil` (default): memory only, which survives reconnects but not the process.
        public var outboxStore: (any OutboxStore)?
        /// How many received messages are remembered to drop redeliveries. Default 4096.
        public var dedupWindow: Int
        /// Whether the gateway sends this device delivered and read notices of the messages
        /// its user sent (``IMClient/Event/receipt(_:)``). Default `true`; `false` asks for none
        /// at LOGIN (RECEIPT_NOTICES = 0, PROTOCOL.md 6.5), e.g. for a device that shows no
        /// ticks. Read receipts this device sends are not affected.
        public var receiptNotices: Bool
        /// Whether the gateway sends this device carbons: copies of the messages its user
        /// sends from other devices (``IMClient/Message/isCarbon``). Default `true`; `false`
        /// asks for none at LOGIN (CARBONS = 0, PROTOCOL.md 6.12).
        public var carbons: Bool
        /// Where new tokens come from (an app's call to its auth server), or `nil` (default):
        /// the session ends when ``token`` expires. Set, the client keeps the session alive
        /// (PROTOCOL.md 6.1.1): when LOGIN_OK or a refresh ACK names the token's expiry, it
        /// asks for a new token at the point ``tokenRefresh`` gives, hands it to the gateway
        /// (TOKEN_REFRESH) and logs in with the newest accepted one after a reconnect; a
        /// provider that throws, or a refusal, is retried with back-off until the expiry (the
        /// connection is not dropped for it). After KICK TOKEN_EXPIRED, or a LOGIN refused
        /// with TOKEN_EXPIRED on a reconnect, it reconnects with a token from the provider
        /// instead of ending. Called on no particular executor; one call at a time.
        public var tokenProvider: (@Sendable () async throws -> String)?
        /// When to refresh: 80% of the token's lifetime or 60 s before it expires, whichever
        /// comes first, retried after 1 s, 2 s ... 32 s (``TokenRefreshSchedule``). Used only
        /// with a ``tokenProvider``.
        public var tokenRefresh: TokenRefreshSchedule.Configuration
        /// Where the device was in its stream of stored messages when the app last ran
        /// (``IMClient/syncPosition``, kept by the app), or `nil` (default): the gateway uses
        /// the position it kept for the device. Sent in LOGIN, so that a gateway with an
        /// archive catches the device up from there (PROTOCOL.md 6.14).
        public var syncPosition: StreamPosition?
        /// Whether the client asks the gateway after each login for the end of its catch-up
        /// (a SYNC, answered by ``IMClient/Event/synced(_:)``). Default `true`; the messages
        /// come either way.
        public var syncOnLogin: Bool

        /// A configuration for `token`, with the defaults for everything else.
        public init(
            host: String = "127.0.0.1",
            port: Int = 6969,
            token: String,
            deviceID: String? = nil,
            tls: TLSConfiguration? = nil,
            tlsServerName: String? = nil,
            heartbeat: AdaptiveHeartbeat.Configuration = .init(),
            appMode: AdaptiveHeartbeat.Mode = .foreground,
            ackTimeout: Duration = .seconds(10),
            maxRetransmits: Int = 3,
            sendTimeout: Duration? = .seconds(120),
            connectTimeout: Duration = .seconds(10),
            reconnect: Bool = true,
            backoff: ReconnectBackoff = .init(),
            maxInFlight: Int = 64,
            outboxStore: (any OutboxStore)? = nil,
            dedupWindow: Int = 4096,
            receiptNotices: Bool = true,
            carbons: Bool = true,
            tokenProvider: (@Sendable () async throws -> String)? = nil,
            tokenRefresh: TokenRefreshSchedule.Configuration = .init(),
            syncPosition: StreamPosition? = nil,
            syncOnLogin: Bool = true
        ) {
            self.syncPosition = syncPosition
            self.syncOnLogin = syncOnLogin
            self.host = host
            self.port = port
            self.token = token
            self.deviceID = deviceID
            self.tls = tls
            self.tlsServerName = tlsServerName
            self.heartbeat = heartbeat
            self.appMode = appMode
            self.ackTimeout = ackTimeout
            self.maxRetransmits = maxRetransmits
            self.sendTimeout = sendTimeout
            self.connectTimeout = connectTimeout
            self.reconnect = reconnect
            self.backoff = backoff
            self.maxInFlight = maxInFlight
            self.outboxStore = outboxStore
            self.dedupWindow = dedupWindow
            self.receiptNotices = receiptNotices
            self.carbons = carbons
            self.tokenProvider = tokenProvider
            self.tokenRefresh = tokenRefresh
        }

        /// The heartbeat interval assumed when LOGIN_OK announces none (PROTOCOL.md 6.2).
        public static let defaultHeartbeatInterval = Duration.seconds(30)

        /// The heartbeat configuration for a gateway announcing `announced`: `maxInterval`
        /// no longer than it, `minInterval` no longer than `maxInterval`.
        func heartbeat(announced: Duration) -> AdaptiveHeartbeat.Configuration {
            var result = heartbeat
            result.maxInterval = min(result.maxInterval, announced)
            result.minInterval = min(result.minInterval, result.maxInterval)
            return result
        }
    }

    /// The logged-in session, as LOGIN_OK described it.
    public struct Session: Sendable, Hashable {
        /// The user id (the token's `sub`).
        public var userID: String
        /// The device id in use.
        public var deviceID: String?
        /// The gateway's clock at login, Unix milliseconds.
        public var serverTime: UInt64?
        /// The heartbeat interval the gateway expects (at most this much silence).
        public var heartbeatInterval: Duration
        /// Whether the broker kept this device's session: `false` means a new one, so what
        /// was queued for the device before this login (if anything) is gone, and the app may
        /// fetch its history from its server. `nil` when the gateway does not say.
        public var resumed: Bool? = nil
        /// From a gateway with a message archive: how it took this device's position in its
        /// stream (what the broker lost is caught up from the archive); `nil` without one.
        public var syncStatus: IMSyncStatus? = nil
    }

    /// Where the connection is (the ``ConnectionStateMachine`` state, seed 000).
    public enum ConnectionState: Sendable, Hashable {
        /// No connection: waiting to reconnect, or closed for good.
        case disconnected
        /// Opening the connection or logging in.
        case connecting
        /// Logged in.
        case connected
        /// Closing at the application's request.
        case disconnecting
    }
}
