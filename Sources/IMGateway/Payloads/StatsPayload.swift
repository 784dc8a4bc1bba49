/// The gateway's counters, published every `stats_interval` seconds on
/// `{prefix}/$gateway/{id}/stats` (retained, so the last one shows after a restart).
///
/// ```json
/// {"connections":3,"gateway":"gw-1","instance":"1y2p0ij32e8e7","logged_in":2,"messages_in":10,"messages_out":12,"sessions":2,"ts":1735689600123,"uptime_s":3600,"version":"0.1.0"}
/// ```
public struct StatsPayload: Codable, Hashable, Sendable {
    /// The gateway id.
    public var gateway: String
    /// When the counters were read, Unix milliseconds.
    public var ts: UInt64
    /// Open TLV connections.
    public var connections: Int
    /// Connections that are logged in.
    public var loggedIn: Int
    /// Open MQTT device sessions.
    public var sessions: Int
    /// Chat messages accepted from devices since start.
    public var messagesIn: Int
    /// Messages written to devices since start.
    public var messagesOut: Int
    /// Seconds since the gateway started.
    public var uptimeSeconds: Int
    /// The gateway's version.
    public var version: String
    /// A random id of the gateway process: two processes given one `gateway_id` differ here.
    public var instance: String?

    enum CodingKeys: String, CodingKey {
        case gateway, ts, connections, sessions, version, instance
        case loggedIn = "logged_in"
        case messagesIn = "messages_in"
        case messagesOut = "messages_out"
        case uptimeSeconds = "uptime_s"
    }

    /// Creates a stats payload.
    public init(
        gateway: String, ts: UInt64, connections: Int, loggedIn: Int, sessions: Int, messagesIn: Int, messagesOut: Int,
        uptimeSeconds: Int, version: String = IMGatewayInfo.version, instance: String? = nil
    ) {
        self.gateway = gateway
        self.ts = ts
        self.connections = connections
        self.loggedIn = loggedIn
        self.sessions = sessions
        self.messagesIn = messagesIn
        self.messagesOut = messagesOut
        self.uptimeSeconds = uptimeSeconds
        self.version = version
        self.instance = instance
    }
}
