import IMWire

/// Why a client's topic or topic filter was refused, with the offending topic.
public enum TopicError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The topic is empty.
    case empty
    /// The topic is longer than ``IMWire/topicLength`` allows (UTF-8 bytes).
    case tooLong(String, length: Int)
    /// The topic contains `$`, NUL or another control character.
    case forbiddenCharacter(String, Unicode.Scalar)
    /// The topic does not lie inside the gateway's pub/sub space `{prefix}/{space}/...`.
    case outsideSpace(String, space: String)
    /// A topic to publish to contains the wildcard `+` or `#`.
    case wildcardInTopic(String)
    /// A filter uses a wildcard wrongly: `#` not alone in the last level, `+` not alone in its level.
    case misplacedWildcard(String)

    /// The protocol code to answer with: always ``IMErrorCode/invalidTopic``.
    public var errorCode: IMErrorCode { .invalidTopic }

    public var description: String {
        switch self {
        case .empty:
            "topic is empty"
        case .tooLong(let topic, let length):
            "topic \(topic.prefix(64).debugDescription)... is \(length) bytes long (at most \(IMWire.topicLength.upperBound))"
        case .forbiddenCharacter(let topic, let scalar):
            "topic \(topic.debugDescription) contains \(scalar.escaped(asASCII: true).debugDescription) (no $ or control characters)"
        case .outsideSpace(let topic, let space):
            "topic \(topic.debugDescription) is outside the pub/sub space \(space)#"
        case .wildcardInTopic(let topic):
            "topic \(topic.debugDescription) contains a wildcard; only filters may"
        case .misplacedWildcard(let topic):
            "filter \(topic.debugDescription) misuses a wildcard (# only as the whole last level, + only as a whole level)"
        }
    }
}
