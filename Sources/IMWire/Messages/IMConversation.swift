/// A conversation on the wire: TO (one-to-one with a user) or GROUP, exactly one of them.
public enum IMConversation: Hashable, Sendable, CustomStringConvertible {
    /// With this user.
    case user(String)
    /// In this group.
    case group(String)

    /// Reads TO or GROUP: exactly one must be there.
    init(fields: TLVFields) throws(IMWireError) {
        let to = try fields.optionalIdentifier(.to)
        let group = try fields.optionalIdentifier(.group)
        switch (to, group) {
        case (let to?, nil): self = .user(to)
        case (nil, let group?): self = .group(group)
        case (nil, nil): throw .missingField(.to)
        case (_?, _?): throw .invalidField(.group, .duplicate)
        }
    }

    func write(to writer: inout TLVWriter) {
        switch self {
        case .user(let id): writer.write(.to, string: id)
        case .group(let id): writer.write(.group, string: id)
        }
    }

    public var description: String {
        switch self {
        case .user(let id): "user \(id)"
        case .group(let id): "group \(id)"
        }
    }
}
