import IMWire

/// Failures of the gateway layer.
public enum GatewayError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The embedded broker did not start (the reason, and what it printed).
    case embeddedBrokerFailed(String)
    /// A connection timed out (login or idle) and was closed with this code.
    case timedOut(IMErrorCode)
    /// The session was taken over by a newer login of the same user and device.
    case takenOver
    /// The gateway is shutting down.
    case shuttingDown

    public var description: String {
        switch self {
        case .embeddedBrokerFailed(let why): return "embedded broker failed: \(why)"
        case .timedOut(let code): return "timed out (\(code))"
        case .takenOver: return "session taken over"
        case .shuttingDown: return "gateway shutting down"
        }
    }
}
