/// SYNC (CONTROL, op 0x0016), client to gateway: deliver now every stored message after the
/// device's position that this connection has not delivered yet (an app coming to the
/// foreground; PROTOCOL.md 6.14).
///
/// Answered by an ``Ack`` once those messages are written (DELIVERY frames with ARCHIVED), with
/// STREAM_EPOCH, STREAM_OFFSET (the stream's end it caught up to) and SYNC_STATUS; or a
/// negative ACK (STORE_UNAVAILABLE with RETRY_AFTER, BAD_REQUEST, UNKNOWN_OPERATION from a
/// gateway without an archive). Always written with its operation item.
public struct Sync: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .sync }

    /// Where the device is; `nil`: where the gateway knows it is.
    public var position: StreamPosition?

    /// Creates a SYNC.
    public init(position: StreamPosition? = nil) {
        self.position = position
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.position = try StreamPosition.read(fields)
    }

    public func write(to writer: inout TLVWriter) {
        position?.write(to: &writer)
    }
}
