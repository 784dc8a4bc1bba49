import IMWire

/// Why an ``IMClient`` operation failed.
public enum IMClientError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The TCP connection to `host`:`port` could not be opened (refused, unreachable, no
    /// answer within the connect timeout). `reason` is the system's explanation.
    case cannotConnect(host: String, port: Int, reason: String)
    /// The TLS handshake with `host`:`port` failed (an untrusted or mismatched certificate,
    /// or a listener that does not speak TLS); `reason` is NIOSSL's.
    case tlsFailed(host: String, port: Int, reason: String)
    /// The gateway refused the LOGIN with an ERROR frame (AUTH_FAILED, TOKEN_EXPIRED,
    /// INVALID_USER_ID, ...) and closed the connection.
    case loginRefused(IMErrorCode, String?)
    /// The gateway refused a request with a negative ACK (FORBIDDEN, INVALID_USER_ID,
    /// MESSAGE_ID_REUSED, RATE_LIMITED, BROKER_UNAVAILABLE, ...); the connection stays open.
    case refused(IMErrorCode, String?)
    /// No answer within ``IMClient/Configuration/ackTimeout``. The request may still have
    /// reached the gateway: resend a chat message with the same id.
    case timeout
    /// The connection is closed, or closed before the answer arrived. A chat message may
    /// still have reached the gateway: resend it with the same id after reconnecting.
    case disconnected
    /// The gateway sent something this client cannot accept (e.g. no LOGIN_OK after LOGIN).
    case protocolViolation(String)
    /// The heartbeat found the connection dead: its ACKs stopped coming
    /// (``AdaptiveHeartbeat/Configuration/failuresUntilDead`` in a row).
    case connectionDead
    /// The gateway ended the session with a KICK (the code says why).
    case kicked(IMErrorCode, String?)
    /// The application said the device moved to another network
    /// (``IMClient/networkChanged()``): the connection over the old one was dropped.
    case networkChanged

    public var description: String {
        switch self {
        case .cannotConnect(let host, let port, let reason):
            "cannot connect to \(host):\(port): \(reason)"
        case .tlsFailed(let host, let port, let reason):
            "cannot connect to \(host):\(port): TLS: \(reason)"
        case .loginRefused(let code, let message):
            "login refused: \(Self.describe(code, message))"
        case .refused(let code, let message):
            "refused: \(Self.describe(code, message))"
        case .timeout:
            "no answer from the gateway in time"
        case .disconnected:
            "the connection to the gateway is closed"
        case .protocolViolation(let what):
            "protocol violation: \(what)"
        case .connectionDead:
            "the connection stopped answering heartbeats"
        case .kicked(let code, let message):
            "kicked by the gateway: \(Self.describe(code, message))"
        case .networkChanged:
            "the device moved to another network"
        }
    }

    /// `NAME (code): message`.
    static func describe(_ code: IMErrorCode, _ message: String?) -> String {
        guard let message, !message.isEmpty else { return code.description }
        return "\(code): \(message)"
    }
}
