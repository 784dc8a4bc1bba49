/// PRESENCE (CONTROL, op 0x0022), gateway to client: a watched user's device is online or
/// offline. A notification: not acknowledged.
public struct PresenceNotice: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .presence }

    /// Presence status (tag 0x0020, u8).
    public enum Status: UInt8, Hashable, Sendable, CaseIterable {
        /// No connection (logged out, or the connection was lost).
        case offline = 0
        /// Logged in.
        case online = 1
    }

    /// The user.
    public var user: String
    /// The device.
    public var device: String?
    /// Online or offline.
    public var status: Status
    /// When the device was last online, Unix milliseconds (for offline).
    public var lastSeen: UInt64?

    /// Creates a presence notice.
    public init(user: String, device: String? = nil, status: Status, lastSeen: UInt64? = nil) {
        self.user = user
        self.device = device
        self.status = status
        self.lastSeen = lastSeen
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.user = try fields.identifier(.userID)
        self.device = try fields.optionalIdentifier(.deviceID)
        let raw = try fields.integer(.userStatus, as: UInt8.self)
        guard let status = Status(rawValue: raw) else {
            throw .invalidField(.userStatus, .valueOutOfRange(String(raw)))
        }
        self.status = status
        self.lastSeen = try fields.optionalInteger(.lastSeen)
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.userID, string: self.user)
        if let device { writer.write(.deviceID, string: device) }
        writer.write(.userStatus, integer: self.status.rawValue)
        if let lastSeen { writer.write(.lastSeen, integer: lastSeen) }
    }
}
