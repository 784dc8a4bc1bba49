/// A conversation, as one user sees it: with another user, or in a group. A copy of a message
/// in a user's stream belongs to one (the peer of a one-to-one message, whichever way it went,
/// or the group), which is what history and the conversation list are read by.
public enum Conversation: Sendable, Hashable, CustomStringConvertible {
    /// One-to-one with this user.
    case user(String)
    /// In this group.
    case group(String)

    /// How the store keeps it: `u:ID` or `g:ID` (ids never hold a NUL, so the prefix cannot
    /// be forged by an id).
    public var key: String {
        switch self {
        case .user(let id): "u:" + id
        case .group(let id): "g:" + id
        }
    }

    /// The conversation a stored key names, or `nil` for a key that is not one.
    public init?(key: String) {
        let id = String(key.dropFirst(2))
        guard !id.isEmpty else { return nil }
        if key.hasPrefix("u:") {
            self = .user(id)
        } else if key.hasPrefix("g:") {
            self = .group(id)
        } else {
            return nil
        }
    }

    /// The user or group id.
    public var id: String {
        switch self {
        case .user(let id), .group(let id): id
        }
    }

    public var description: String {
        switch self {
        case .user(let id): "user \(id)"
        case .group(let id): "group \(id)"
        }
    }
}
