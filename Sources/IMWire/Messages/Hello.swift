/// HELLO (CONTROL, op 0x0001), client to gateway: the version and feature handshake.
///
/// Optional, at most once, before or after LOGIN. Answered by ``HelloOK``. The seed client's
/// form, CONTROL with only a VERSION_REQUEST item, is accepted.
public struct Hello: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .hello }

    /// The client's protocol version.
    public var version: IMProtocolVersion
    /// What the client supports; ``IMFeatures/zlib`` lets the gateway compress.
    public var features: IMFeatures
    /// The client's body limit, if below the default.
    public var maxBodyLength: UInt32?

    /// Creates a HELLO.
    public init(version: IMProtocolVersion = .current, features: IMFeatures, maxBodyLength: UInt32? = nil) {
        self.version = version
        self.features = features
        self.maxBodyLength = maxBodyLength
    }

    public init(fields: TLVFields) throws(IMWireError) {
        (self.version, self.features) = try fields.required(.versionRequest).versionAndFeatures()
        self.maxBodyLength = try fields.optionalInteger(.maxBodyLength)
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.versionRequest, version: self.version, features: self.features)
        if let maxBodyLength { writer.write(.maxBodyLength, integer: maxBodyLength) }
    }
}
