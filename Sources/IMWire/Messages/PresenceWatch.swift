/// PRESENCE_WATCH (CONTROL, op 0x0020): watch the presence of users, listed as USER_ID items
/// in one container. The gateway ACKs it (negative: FORBIDDEN) and then sends a
/// ``PresenceNotice`` for every known device of those users and for every change.
public struct PresenceWatch: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .presenceWatch }

    /// The watched users.
    public var users: [String]

    /// Creates a PRESENCE_WATCH.
    public init(users: [String]) { self.users = users }

    public init(fields: TLVFields) throws(IMWireError) { self.users = try fields.identifierList() }

    public func write(to writer: inout TLVWriter) { writer.writeList(.userID, strings: self.users) }
}
