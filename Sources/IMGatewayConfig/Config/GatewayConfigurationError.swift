/// Why a configuration was refused. Every case names the offending key path in YAML
/// spelling, e.g. `listen.port`.
public enum GatewayConfigurationError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The file could not be read.
    case unreadable(path: String, reason: String)
    /// The text is not well-formed YAML (or repeats a key); the message says where.
    case syntax(String)
    /// A key the gateway does not know (a typo, or a setting of another version).
    case unknownKey(String)
    /// A key has a value of the wrong type or out of range. `value` is as written (strings quoted).
    case invalidValue(key: String, value: String, reason: String)
    /// ``GatewayConfiguration/validate()`` found these problems (each an ``invalidValue(key:value:reason:)``).
    case invalid([GatewayConfigurationError])

    public var description: String {
        switch self {
        case .unreadable(let path, let reason): "cannot read \(path): \(reason)"
        case .syntax(let message): "not valid YAML: \(message)"
        case .unknownKey(let key): "\(key): unknown key"
        case .invalidValue(let key, let value, let reason): "\(key): \(value) \(reason)"
        case .invalid(let problems): problems.map(\.description).joined(separator: "\n")
        }
    }
}
