/// UNSUBSCRIBE (CONTROL, op 0x0041): TOPIC items (filters) in one container. The gateway ACKs it.
public struct Unsubscribe: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .unsubscribe }

    /// The filters, exactly as subscribed.
    public var filters: [String]

    /// Creates an UNSUBSCRIBE.
    public init(filters: [String]) { self.filters = filters }

    public init(fields: TLVFields) throws(IMWireError) {
        self.filters = []
        for item in try fields.list(of: .topic) { self.filters.append(try item.string(length: IMWire.topicLength)) }
    }

    public func write(to writer: inout TLVWriter) { writer.writeList(.topic, strings: self.filters) }
}
