import CZlib
import NIOCore

/// Encodes frames: header with body length and CRC-32 of the body as transmitted, then the body.
///
/// A frame whose header says `compressType == .zlib` is sent as a zlib stream (see
/// ``IMCompressType/choose(bodyLength:peerFeatures:threshold:)``). With a ``compressionThreshold``,
/// bodies at least that long are compressed too. Either way a body is sent plain when
/// compression does not make it smaller (unless ``onlyIfSmaller`` is off), and empty bodies are
/// always sent plain. Compress only once the peer announced ``IMFeatures/zlib``.
public struct IMFrameEncoder: MessageToByteEncoder, Sendable {
    public typealias OutboundIn = IMFrame

    /// Bodies of at least this many bytes are compressed automatically; `nil` (default): only
    /// frames that ask for it. Set it only when the peer is known to accept zlib.
    public var compressionThreshold: Int?
    /// zlib level 0–9, or -1 for zlib's default (6).
    public var compressionLevel: Int32
    /// Frames whose transmitted body exceeds this many bytes are refused with `bodyTooLarge`:
    /// the peer would refuse them. Clamped to ``IMWire/hardMaxBodyLength``.
    public var maxBodyLength: Int
    /// Whether a body is sent plain when compressing it does not make it smaller. Default `true`;
    /// `false` honours every compression request (for tests and test vectors).
    public var onlyIfSmaller: Bool

    /// Creates an encoder.
    public init(
        compressionThreshold: Int? = nil,
        compressionLevel: Int32 = Z_DEFAULT_COMPRESSION,
        maxBodyLength: Int = IMWire.hardMaxBodyLength,
        onlyIfSmaller: Bool = true
    ) {
        self.compressionThreshold = compressionThreshold
        self.compressionLevel = compressionLevel
        self.maxBodyLength = min(maxBodyLength, IMWire.hardMaxBodyLength)
        self.onlyIfSmaller = onlyIfSmaller
    }

    /// Appends the encoded frame to `out`.
    public func encode(data frame: IMFrame, out: inout ByteBuffer) throws(IMWireError) {
        var header = frame.header
        var transmitted = frame.body
        let plainLength = frame.body.readableBytes
        let requested = header.compressType == .zlib
        let automatic = self.compressionThreshold.map { plainLength >= $0 } ?? false
        header.compressType = .none
        if plainLength > 0, requested || automatic {
            let compressed = try Zlib.compress(frame.body, level: self.compressionLevel)
            if compressed.readableBytes < plainLength || (requested && !self.onlyIfSmaller) {
                transmitted = compressed
                header.compressType = .zlib
            }
        }
        guard transmitted.readableBytes <= self.maxBodyLength else {
            throw .bodyTooLarge(length: UInt32(clamping: transmitted.readableBytes), limit: self.maxBodyLength)
        }
        header.bodyLength = UInt32(transmitted.readableBytes)
        if header.compressType == .none, let known = frame.bodyChecksum {
            header.checksum = known
        } else {
            header.checksum = Zlib.crc32(transmitted)
        }
        out.reserveCapacity(minimumWritableBytes: IMWire.headerLength + transmitted.readableBytes)
        header.write(to: &out)
        out.writeImmutableBuffer(transmitted)
    }

    /// Encodes one frame into a new buffer.
    public func encode(_ frame: IMFrame, allocator: ByteBufferAllocator = ByteBufferAllocator()) throws(IMWireError)
        -> ByteBuffer
    {
        var out = allocator.buffer(capacity: IMWire.headerLength + frame.body.readableBytes)
        try self.encode(data: frame, out: &out)
        return out
    }
}
