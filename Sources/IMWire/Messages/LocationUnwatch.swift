/// LOCATION_UNWATCH (CONTROL, op 0x0034): stop watching users' locations. The gateway ACKs it.
public struct LocationUnwatch: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .locationUnwatch }

    /// The users no longer watched.
    public var users: [String]

    /// Creates a LOCATION_UNWATCH.
    public init(users: [String]) { self.users = users }

    public init(fields: TLVFields) throws(IMWireError) { self.users = try fields.identifierList() }

    public func write(to writer: inout TLVWriter) { writer.writeList(.userID, strings: self.users) }
}
