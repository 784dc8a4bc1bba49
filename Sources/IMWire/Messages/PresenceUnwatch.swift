/// PRESENCE_UNWATCH (CONTROL, op 0x0021): stop watching users. The gateway ACKs it.
public struct PresenceUnwatch: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .presenceUnwatch }

    /// The users no longer watched.
    public var users: [String]

    /// Creates a PRESENCE_UNWATCH.
    public init(users: [String]) { self.users = users }

    public init(fields: TLVFields) throws(IMWireError) { self.users = try fields.identifierList() }

    public func write(to writer: inout TLVWriter) { writer.writeList(.userID, strings: self.users) }
}
