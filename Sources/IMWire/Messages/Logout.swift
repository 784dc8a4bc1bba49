/// LOGOUT (CONTROL, op 0x0012), client to gateway: end this device's session.
///
/// The gateway ACKs it and closes the connection; messages not yet delivered to this device are dropped.
public struct Logout: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .logout }

    /// Creates a LOGOUT.
    public init() {}

    public init(fields: TLVFields) throws(IMWireError) {}

    public func write(to writer: inout TLVWriter) {}
}
