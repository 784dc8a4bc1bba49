import IMWire

/// Failures of the gateway layer.
public enum GatewayError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The embedded broker did not start (the reason, and what it printed).
    case embeddedBrokerFailed(String)
    /// The message archive cannot be opened (what the store said).
    case archiveFailed(String)
    /// Another gateway uses the same broker while this one keeps its archive in a local file.
    case archiveNotShared(String)

    public var description: String {
        switch self {
        case .embeddedBrokerFailed(let why): return "embedded broker failed: \(why)"
        case .archiveFailed(let why): return "the message archive cannot be opened: \(why)"
        case .archiveNotShared(let why): return why
        }
    }
}
