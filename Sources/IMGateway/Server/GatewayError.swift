import IMWire

/// Failures of the gateway layer.
public enum GatewayError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The embedded broker did not start (the reason, and what it printed).
    case embeddedBrokerFailed(String)

    public var description: String {
        switch self {
        case .embeddedBrokerFailed(let why): return "embedded broker failed: \(why)"
        }
    }
}
