/// LOCATION_SHARE_START (CONTROL, op 0x0030): share this user's location with an audience
/// (USER_ID items in one container) for DURATION seconds. Replaces a running share.
/// The gateway ACKs it (negative: FORBIDDEN for an audience member it refuses).
public struct LocationShareStart: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .locationShareStart }

    /// Who may watch.
    public var audience: [String]
    /// How long the share lasts, in seconds (at least 1).
    public var duration: UInt32

    /// Creates a LOCATION_SHARE_START.
    public init(audience: [String], duration: UInt32) {
        self.audience = audience
        self.duration = duration
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.audience = try fields.identifierList()
        self.duration = try fields.integer(.duration)
        guard self.duration > 0 else { throw .invalidField(.duration, .valueOutOfRange("0")) }
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.duration, integer: self.duration)
        writer.writeList(.userID, strings: self.audience)
    }
}
