/// LOCATION (CONTROL, op 0x0035), gateway to client: a watched user's fix. A notification:
/// not acknowledged. First the retained last fix, then every update.
public struct LocationNotice: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .location }

    /// The user sharing.
    public var user: String
    /// The device that sent the fix.
    public var device: String?
    /// The fix.
    public var location: IMLocation

    /// Creates a LOCATION notice.
    public init(user: String, device: String? = nil, location: IMLocation) {
        self.user = user
        self.device = device
        self.location = location
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.user = try fields.identifier(.userID)
        self.device = try fields.optionalIdentifier(.deviceID)
        self.location = try IMLocation(fields: fields)
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.userID, string: self.user)
        if let device { writer.write(.deviceID, string: device) }
        self.location.write(to: &writer)
    }
}
