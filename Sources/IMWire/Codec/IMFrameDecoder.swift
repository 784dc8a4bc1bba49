import NIOCore

/// Decodes frames from a byte stream, checking everything the protocol requires.
///
/// Per frame, in this order: magic, version major, type, encrypt type, compress type (see
/// ``IMFrameHeader/read(from:)``); then, *before waiting for the body*, the announced length
/// against the limit and against the shortest valid body of its kind; then the CRC-32 of the
/// body as transmitted; then bounded inflation of a zlib body; then the TLV structure.
/// Any failure throws an ``IMWireError``; the stream is never resynchronised.
///
/// Shortest valid bodies: empty, or 6 bytes (one item header) uncompressed, or 8 bytes (one
/// zlib stream) compressed. A HEARTBEAT body is empty. An ACK may carry the seed client's
/// 4-byte body (the acknowledged sequence), which is not TLV.
public struct IMFrameDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = IMFrame

    /// Decoder settings.
    public struct Configuration: Hashable, Sendable {
        /// The body limit in bytes, for transmitted and for decompressed bodies.
        /// Clamped to ``IMWire/hardMaxBodyLength``; default ``IMWire/defaultMaxBodyLength``.
        public var maxBodyLength: Int {
            didSet { self.maxBodyLength = Self.clamp(self.maxBodyLength) }
        }
        /// Whether zlib bodies are accepted (otherwise refused with `unsupportedCompression`). Default `true`.
        public var acceptsCompression: Bool
        /// Whether the seed client's 4-byte ACK body is accepted. Default `true`.
        public var acceptsSeedAck: Bool

        /// Creates a configuration; `maxBodyLength` is clamped to 0...10 MiB.
        public init(
            maxBodyLength: Int = IMWire.defaultMaxBodyLength,
            acceptsCompression: Bool = true,
            acceptsSeedAck: Bool = true
        ) {
            self.maxBodyLength = Self.clamp(maxBodyLength)
            self.acceptsCompression = acceptsCompression
            self.acceptsSeedAck = acceptsSeedAck
        }

        private static func clamp(_ value: Int) -> Int { min(max(value, 0), IMWire.hardMaxBodyLength) }
    }

    /// The settings in use.
    public let configuration: Configuration

    /// Creates a decoder.
    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    /// Creates a decoder with a body limit (clamped to 10 MiB) and the other settings at their defaults.
    public init(maxBodyLength: Int) {
        self.init(configuration: Configuration(maxBodyLength: maxBodyLength))
    }

    /// Decodes one frame, or returns `nil` (consuming nothing) until the whole frame is buffered.
    public mutating func decode(buffer: inout ByteBuffer) throws(IMWireError) -> IMFrame? {
        let start = buffer.readerIndex
        guard let header = try IMFrameHeader.read(from: &buffer) else { return nil }
        do {
            try self.checkAnnouncedLength(of: header)
        } catch {
            buffer.moveReaderIndex(to: start)
            throw error
        }
        guard let transmitted = buffer.readSlice(length: Int(header.bodyLength)) else {
            buffer.moveReaderIndex(to: start)
            return nil
        }
        let computed = Zlib.crc32(transmitted)
        guard computed == header.checksum else { throw .badChecksum(announced: header.checksum, computed: computed) }

        let body: ByteBuffer
        switch header.compressType {
        case .none: body = transmitted
        case .zlib: body = try Zlib.decompress(transmitted, limit: self.configuration.maxBodyLength)
        }
        if !Self.isSeedAck(header, body: body, accepted: self.configuration.acceptsSeedAck) {
            try TLVReader.validate(body)
        }
        return IMFrame(decodedHeader: header, body: body)
    }

    /// Decodes what is left at the end of the stream; bytes of an incomplete frame are an error.
    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws(IMWireError) -> IMFrame? {
        if let frame = try self.decode(buffer: &buffer) { return frame }
        if seenEOF, buffer.readableBytes > 0 { throw .truncatedFrame(received: buffer.readableBytes) }
        return nil
    }

    /// Refuses a length above the limit or below the shortest valid body, before any body byte is read.
    private func checkAnnouncedLength(of header: IMFrameHeader) throws(IMWireError) {
        if header.compressType == .zlib, !self.configuration.acceptsCompression {
            throw .unsupportedCompression(header.compressType.rawValue)
        }
        guard header.bodyLength <= self.configuration.maxBodyLength else {
            throw .bodyTooLarge(length: header.bodyLength, limit: self.configuration.maxBodyLength)
        }
        let length = Int(header.bodyLength)
        let valid: Bool
        switch (header.type, header.compressType) {
        case (.heartbeat, _):
            valid = length == 0
        case (.ack, .none) where length == IMWire.seedAckBodyLength:
            valid = self.configuration.acceptsSeedAck
        case (_, .none):
            valid = length == 0 || length >= IMWire.tlvItemHeaderLength
        case (_, .zlib):
            valid = length >= IMWire.minimumCompressedBodyLength
        }
        guard valid else {
            throw .invalidBodyLength(type: header.type, compressType: header.compressType, length: header.bodyLength)
        }
    }

    static func isSeedAck(_ header: IMFrameHeader, body: ByteBuffer, accepted: Bool) -> Bool {
        accepted && header.type == .ack && header.compressType == .none
            && body.readableBytes == IMWire.seedAckBodyLength
    }
}
