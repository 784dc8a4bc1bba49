/// HELLO_OK (CONTROL, op 0x0002), gateway to client: the gateway's version and features.
///
/// Once received with ``IMFeatures/zlib``, the client may compress.
public struct HelloOK: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .helloOK }

    /// The version both sides speak: the lower of the two.
    public var version: IMProtocolVersion
    /// What the gateway supports.
    public var features: IMFeatures
    /// The gateway's body limit.
    public var maxBodyLength: UInt32?
    /// The HELLO's sequence.
    public var refSequence: UInt32?

    /// Creates a HELLO_OK.
    public init(
        version: IMProtocolVersion = .current,
        features: IMFeatures,
        maxBodyLength: UInt32? = nil,
        refSequence: UInt32? = nil
    ) {
        self.version = version
        self.features = features
        self.maxBodyLength = maxBodyLength
        self.refSequence = refSequence
    }

    public init(fields: TLVFields) throws(IMWireError) {
        (self.version, self.features) = try fields.required(.versionResponse).versionAndFeatures()
        self.maxBodyLength = try fields.optionalInteger(.maxBodyLength)
        self.refSequence = try fields.optionalInteger(.refSequence)
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.versionResponse, version: self.version, features: self.features)
        if let maxBodyLength { writer.write(.maxBodyLength, integer: maxBodyLength) }
        if let refSequence { writer.write(.refSequence, integer: refSequence) }
    }
}
