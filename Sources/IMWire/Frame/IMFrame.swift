import NIOCore

/// A frame: header and plain (decompressed) TLV body.
///
/// Invariant: when ``IMFrameHeader/compressType`` is `.none`, ``IMFrameHeader/bodyLength``
/// and ``IMFrameHeader/checksum`` describe ``body``. A decoded compressed frame keeps the
/// transmitted length and checksum in its header while ``body`` holds the inflated TLV.
/// On an outbound frame, `compressType == .zlib` asks the encoder to compress the body.
///
/// Two frames are equal when their headers and bodies are.
public struct IMFrame: Hashable, Sendable {
    /// The header. Length and checksum are maintained by the initialisers, the decoder and the encoder.
    public var header: IMFrameHeader
    /// The plain TLV body (for the seed's ACK form: 4 raw bytes).
    public private(set) var body: ByteBuffer
    /// The CRC-32 of ``body`` where it is known: computed by the initialisers, or checked by the
    /// decoder on a plain frame. The encoder sends it for a body it transmits plain instead of
    /// computing it again. Kept apart from ``header``, which callers may change.
    let bodyChecksum: UInt32?

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
        let checksum = Zlib.crc32(body)
        header.bodyLength = UInt32(truncatingIfNeeded: body.readableBytes)
        header.checksum = checksum
        self.header = header
        self.body = body
        self.bodyChecksum = checksum
    }

    /// A frame exactly as decoded: `header` carries transmitted length and checksum, which the
    /// decoder has checked; they describe `body` only when it was transmitted plain.
    init(decodedHeader: IMFrameHeader, body: ByteBuffer) {
        self.header = decodedHeader
        self.body = body
        self.bodyChecksum = decodedHeader.compressType == .none ? decodedHeader.checksum : nil
    }

    /// Replaces the body, recomputing length and checksum.
    public mutating func setBody(_ body: ByteBuffer) {
        self = IMFrame(header: self.header, body: body)
    }

    public static func == (lhs: IMFrame, rhs: IMFrame) -> Bool {
        lhs.header == rhs.header && lhs.body == rhs.body
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.header)
        hasher.combine(self.body)
    }

    /// The body's top-level TLV items.
    public func fields() throws(IMWireError) -> TLVFields {
        try TLVFields(parsing: self.body)
    }
}
