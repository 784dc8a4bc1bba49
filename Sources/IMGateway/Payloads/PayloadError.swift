/// Why an MQTT payload could not be read, with the offending field and value.
public enum PayloadError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The bytes are not JSON of the expected shape (missing key, wrong type); the reason is for logs.
    case malformed(String)
    /// A field has a value the gateway cannot use (invalid id, out of range, bad base64...).
    case invalidField(String, value: String)

    public var description: String {
        switch self {
        case .malformed(let reason): "malformed payload: \(reason)"
        case .invalidField(let field, let value): "payload field \(field) has an invalid value \(value.debugDescription)"
        }
    }
}
