import NIOCore

/// A typed message carried in the body of one frame type under one operation.
///
/// Conformers read themselves from the top-level items and write their items; the
/// operation item is handled here. ``Ack`` is not a body message: its header sequence matters.
public protocol IMMessageBody: Hashable, Sendable {
    /// The frame type this message travels in.
    static var frameType: IMFrameType { get }
    /// The operation; written into the body unless ``IMOperation/isImplied``.
    static var operation: IMOperation { get }
    /// Reads the message from the body's top-level items. Unknown items are ignored.
    init(fields: TLVFields) throws(IMWireError)
    /// Writes the message's items (not the operation item).
    func write(to writer: inout TLVWriter)
}

extension IMMessageBody {
    /// Reads the message from a frame, checking frame type and operation.
    public init(frame: IMFrame) throws(IMWireError) {
        guard frame.header.type == Self.frameType else {
            throw .unexpectedFrameType(expected: Self.frameType, actual: frame.header.type)
        }
        let fields = try frame.fields()
        let operation = try IMOperation.of(type: frame.header.type, fields: fields)
        guard operation == Self.operation else {
            throw .unexpectedOperation(expected: Self.operation, actual: operation ?? Self.operation)
        }
        try self.init(fields: fields)
    }

    /// The plain TLV body: the operation item (unless implied), then the message's items.
    public func body(allocator: ByteBufferAllocator = ByteBufferAllocator()) -> ByteBuffer {
        var writer = TLVWriter(allocator: allocator)
        if !Self.operation.isImplied {
            writer.write(.operation, integer: Self.operation.rawValue)
        }
        self.write(to: &writer)
        return writer.buffer
    }

    /// A frame carrying this message.
    /// - Parameters:
    ///   - sequence: The sender's next sequence number.
    ///   - timestamp: Unix seconds at the sender.
    ///   - sessionID: The logical channel; a reply echoes the request's.
    ///   - compressType: `.zlib` to ask the encoder to compress the body.
    public func frame(
        sequence: UInt32,
        timestamp: UInt32,
        sessionID: UInt16,
        compressType: IMCompressType = .none
    ) -> IMFrame {
        IMFrame(
            type: Self.frameType,
            sequence: sequence,
            timestamp: timestamp,
            sessionID: sessionID,
            body: self.body(),
            compressType: compressType
        )
    }
}
