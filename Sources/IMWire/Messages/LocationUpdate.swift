/// LOCATION_UPDATE (CONTROL, op 0x0032): a new fix of this device while sharing.
/// The gateway ACKs it (negative: FORBIDDEN when no share is running).
public struct LocationUpdate: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .locationUpdate }

    /// The fix.
    public var location: IMLocation

    /// Creates a LOCATION_UPDATE.
    public init(location: IMLocation) { self.location = location }

    public init(fields: TLVFields) throws(IMWireError) { self.location = try IMLocation(fields: fields) }

    public func write(to writer: inout TLVWriter) { self.location.write(to: &writer) }
}
