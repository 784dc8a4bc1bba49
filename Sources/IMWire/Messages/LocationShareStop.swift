/// LOCATION_SHARE_STOP (CONTROL, op 0x0031): stop sharing now. The gateway ACKs it and
/// clears the retained last position.
public struct LocationShareStop: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .locationShareStop }

    /// Creates a LOCATION_SHARE_STOP.
    public init() {}

    public init(fields: TLVFields) throws(IMWireError) {}

    public func write(to writer: inout TLVWriter) {}
}
