/// LOCATION_WATCH (CONTROL, op 0x0033): watch users' locations (USER_ID items in one
/// container). The gateway ACKs it; ``LocationNotice``s follow for users whose audience includes
/// this user (others are silently not delivered).
public struct LocationWatch: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .locationWatch }

    /// The watched users.
    public var users: [String]

    /// Creates a LOCATION_WATCH.
    public init(users: [String]) { self.users = users }

    public init(fields: TLVFields) throws(IMWireError) { self.users = try fields.identifierList() }

    public func write(to writer: inout TLVWriter) { writer.writeList(.userID, strings: self.users) }
}
