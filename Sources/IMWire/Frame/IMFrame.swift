import NIOCore

/// A frame: header and plain (decompressed) TLV body.
///
/// Invariant: when ``IMFrameHeader/compressType`` is `.none`, ``IMFrameHeader/bodyLength``
/// and ``IMFrameHeader/checksum`` describe ``body``. A decoded compressed frame keeps the
/// transmitted length and checksum in its header while ``body`` holds the inflated TLV.
/// On an outbound frame, `compressType == .zlib` asks the encoder to compress the body.
public struct IMFrame: Hashable, Sendable {
    /// The header. Length and checksum are maintained by the initialisers, the decoder and the encoder.
    public var header: IMFrameHeader
    /// The plain TLV body (for the seed's ACK form: 4 raw bytes).
    public private(set) var body: ByteBuffer

    /// Creates a frame, computing body length and checksum of the plain body.
    public init(
        type: IMFrameType,
        sequence: UInt32,
        timestamp: UInt32,
        sessionID: UInt16,
        body: ByteBuffer = ByteBuffer(),
        compressType: IMCompressType = .none,
        encryptType: IMEncryptType = .none
    ) {
        self.init(
            header: IMFrameHeader(
                type: type,
                sequence: sequence,
                timestamp: timestamp,
                encryptType: encryptType,
                compressType: compressType,
                sessionID: sessionID
            ),
            body: body
        )
    }

    /// Creates a frame from a header and a plain body. The header's length and checksum are
    /// replaced by those of `body`.
    public init(header: IMFrameHeader, body: ByteBuffer) {
        var header = header
        header.bodyLength = UInt32(truncatingIfNeeded: body.readableBytes)
        header.checksum = Zlib.crc32(body)
        self.header = header
        self.body = body
    }

    /// A frame exactly as decoded: `header` carries transmitted length and checksum.
    init(decodedHeader: IMFrameHeader, body: ByteBuffer) {
        self.header = decodedHeader
        self.body = body
    }

    /// Replaces the body, recomputing length and checksum.
    public mutating func setBody(_ body: ByteBuffer) {
        self = IMFrame(header: self.header, body: body)
    }

    /// The body's top-level TLV items.
    public func fields() throws(IMWireError) -> TLVFields {
        try TLVFields(parsing: self.body)
    }
}
