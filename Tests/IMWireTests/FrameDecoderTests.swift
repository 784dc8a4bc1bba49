import IMWire
import NIOCore
import NIOEmbedded
import NIOTestUtils
import Testing

@Suite("Frame decoder")
struct FrameDecoderTests {
    static let time: UInt32 = 1_735_689_600

    static func wire(_ frame: IMFrame) throws -> ByteBuffer { try IMFrameEncoder().encode(frame) }

    /// Decodes `bytes` with a fresh decoder, returning the frames or throwing the first error.
    static func decodeAll(_ bytes: ByteBuffer, configuration: IMFrameDecoder.Configuration = .init()) throws -> [IMFrame] {
        var input = bytes
        var decoder = IMFrameDecoder(configuration: configuration)
        var frames: [IMFrame] = []
        while let frame = try decoder.decode(buffer: &input) { frames.append(frame) }
        _ = try decoder.decodeLast(buffer: &input, seenEOF: true)
        return frames
    }

    @Test("split and coalesced frames: byte by byte, whole, and many at once")
    func verifier() throws {
        var pairs: [(ByteBuffer, [IMFrame])] = []
        for entry in VectorCatalog.entries {
            var wire = try Self.wire(entry.frame)
            // What the decoder produces for this frame (compressed frames carry wire length and CRC).
            var decoder = IMFrameDecoder()
            let decoded = try #require(try decoder.decode(buffer: &wire))
            pairs.append((try Self.wire(entry.frame), [decoded]))
        }
        // Two frames in one write.
        let two = [IMFrame.heartbeat(sequence: 1, timestamp: Self.time), IMFrame.heartbeat(sequence: 2, timestamp: Self.time)]
        var both = try Self.wire(two[0])
        both.writeImmutableBuffer(try Self.wire(two[1]))
        pairs.append((both, two))
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: pairs) { IMFrameDecoder() }
    }

    @Test("an oversized length is refused as soon as the header is in, before any body byte")
    func oversizedRefusedEarly() throws {
        var header = ByteBuffer()
        IMFrameHeader(type: .data, sequence: 9, timestamp: Self.time, sessionID: 1, bodyLength: 1_048_577).write(to: &header)
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(IMFrameDecoder()))
        // 27 bytes: nothing yet.
        try channel.writeInbound(header.getSlice(at: 0, length: 27)!)
        #expect(try channel.readInbound(as: IMFrame.self) == nil)
        #expect(throws: IMWireError.bodyTooLarge(length: 1_048_577, limit: 1_048_576)) {
            try channel.writeInbound(header.getSlice(at: 27, length: 1)!)
        }
        _ = try? channel.finish()
    }

    @Test("the limit is configurable and capped at 10 MiB")
    func limits() throws {
        #expect(IMFrameDecoder(maxBodyLength: 100 << 20).configuration.maxBodyLength == 10 << 20)
        var config = IMFrameDecoder.Configuration(maxBodyLength: 64)
        config.maxBodyLength = 11 << 20
        #expect(config.maxBodyLength == 10 << 20)
        let frame = ChatSend(to: "bob", messageID: "m", content: .text(String(repeating: "x", count: 100))).frame(sequence: 1, timestamp: 0, sessionID: 1)
        #expect(throws: IMWireError.bodyTooLarge(length: frame.header.bodyLength, limit: 64)) {
            try Self.decodeAll(try Self.wire(frame), configuration: .init(maxBodyLength: 64))
        }
        #expect(try Self.decodeAll(try Self.wire(frame), configuration: .init(maxBodyLength: Int(frame.header.bodyLength))).count == 1)
    }

    static let impossibleLengths: [(IMFrameType, IMCompressType, UInt32)] = [
        (.heartbeat, .none, 6), (.data, .none, 1), (.data, .none, 5), (.control, .none, 4), (.ack, .none, 3),
        (.ack, .zlib, 4), (.data, .zlib, 7), (.data, .zlib, 0),
    ]

    @Test("impossible body lengths are refused before the body", arguments: impossibleLengths)
    func impossibleLength(type: IMFrameType, compress: IMCompressType, length: UInt32) {
        var header = ByteBuffer()
        IMFrameHeader(type: type, sequence: 1, timestamp: 0, compressType: compress, sessionID: 1, bodyLength: length).write(to: &header)
        var decoder = IMFrameDecoder()
        #expect(throws: IMWireError.invalidBodyLength(type: type, compressType: compress, length: length)) {
            try decoder.decode(buffer: &header)
        }
    }

    @Test("a bad CRC is refused; so is a CRC in little-endian order")
    func checksum() throws {
        let frame = ChatSend(to: "bob", messageID: "m-1", content: .text("hi")).frame(sequence: 3, timestamp: Self.time, sessionID: 1)
        var wire = try Self.wire(frame)
        let crc = frame.header.checksum
        wire.setInteger(crc.byteSwapped, at: 24, endianness: .big)
        #expect(throws: IMWireError.badChecksum(announced: crc.byteSwapped, computed: crc)) { try Self.decodeAll(wire) }
        // An empty body must announce 0.
        var heartbeat = try Self.wire(.heartbeat(sequence: 1, timestamp: 0))
        heartbeat.setInteger(UInt32(1), at: 24, endianness: .big)
        #expect(throws: IMWireError.badChecksum(announced: 1, computed: 0)) { try Self.decodeAll(heartbeat) }
    }

    @Test("compressed bodies are inflated; the CRC covers the compressed bytes")
    func compressed() throws {
        let chat = ChatSend(to: "bob", messageID: "m-1", content: .text(String(repeating: "abc ", count: 500)))
        let frame = chat.frame(sequence: 3, timestamp: Self.time, sessionID: 1, compressType: .zlib)
        let wire = try Self.wire(frame)
        let transmitted = wire.getSlice(at: 28, length: wire.readableBytes - 28)!
        let decoded = try #require(try Self.decodeAll(wire).first)
        #expect(decoded.header.compressType == .zlib)
        #expect(Int(decoded.header.bodyLength) == transmitted.readableBytes)
        #expect(decoded.header.checksum == IMFrame(type: .data, sequence: 0, timestamp: 0, sessionID: 0, body: transmitted).header.checksum)
        #expect(decoded.body == frame.body)
        #expect(try IMMessage(frame: decoded) == .chat(chat))
        #expect(throws: IMWireError.unsupportedCompression(1)) {
            try Self.decodeAll(wire, configuration: .init(acceptsCompression: false))
        }
    }

    @Test("a zip bomb is refused at the limit")
    func zipBomb() throws {
        var writer = TLVWriter()
        writer.write(.payload, bytes: [UInt8](repeating: 0, count: 8 << 20))
        let frame = IMFrame(type: .data, sequence: 1, timestamp: 0, sessionID: 1, body: writer.buffer, compressType: .zlib)
        let wire = try Self.wire(frame)
        #expect(wire.readableBytes < 16 << 10)
        #expect(throws: IMWireError.decompressedBodyTooLarge(limit: 1 << 20)) { try Self.decodeAll(wire) }
        // Exactly at the limit is fine.
        var exact = TLVWriter()
        exact.write(.payload, bytes: [UInt8](repeating: 0, count: (1 << 20) - 6))
        let atLimit = IMFrame(type: .data, sequence: 1, timestamp: 0, sessionID: 1, body: exact.buffer, compressType: .zlib)
        #expect(try Self.decodeAll(try Self.wire(atLimit)).first?.body.readableBytes == 1 << 20)
    }

    @Test("a cut or padded zlib stream fails to decompress")
    func brokenZlib() throws {
        let frame = ChatSend(to: "bob", messageID: "m-1", content: .text(String(repeating: "abc ", count: 50)))
            .frame(sequence: 3, timestamp: 0, sessionID: 1, compressType: .zlib)
        let wire = try Self.wire(frame)
        func reframed(_ body: ByteBuffer) -> ByteBuffer {
            var header = frame.header
            header.compressType = .zlib
            header.bodyLength = UInt32(body.readableBytes)
            header.checksum = IMFrame(type: .data, sequence: 0, timestamp: 0, sessionID: 0, body: body).header.checksum
            var out = ByteBuffer()
            header.write(to: &out)
            out.writeImmutableBuffer(body)
            return out
        }
        let stream = wire.getSlice(at: 28, length: wire.readableBytes - 28)!
        var cut = stream.getSlice(at: 0, length: stream.readableBytes - 3)!
        #expect(throws: IMWireError.decompressionFailed(zlibStatus: -5)) { try Self.decodeAll(reframed(cut)) }
        cut = stream
        cut.writeBytes([0])
        #expect(throws: IMWireError.decompressionFailed(zlibStatus: -3)) { try Self.decodeAll(reframed(cut)) }
    }

    @Test("the seed ACK body is accepted unless disabled")
    func seedAck() throws {
        let frame = IMFrame(type: .ack, sequence: 9, timestamp: 0, sessionID: 1, body: ByteBuffer(bytes: [0, 0, 0, 3]))
        let wire = try Self.wire(frame)
        let decoded = try #require(try Self.decodeAll(wire).first)
        let ack = try Ack(frame: decoded)
        #expect(ack.sequence == 3 && ack.isSeedForm)
        #expect(throws: IMWireError.invalidBodyLength(type: .ack, compressType: .none, length: 4)) {
            try Self.decodeAll(wire, configuration: .init(acceptsSeedAck: false))
        }
    }

    @Test("a stream ending inside a frame is an error at EOF")
    func truncated() throws {
        let wire = try Self.wire(.heartbeat(sequence: 1, timestamp: 0))
        var input = wire.getSlice(at: 0, length: 20)!
        var decoder = IMFrameDecoder()
        #expect(try decoder.decode(buffer: &input) == nil)
        #expect(try decoder.decodeLast(buffer: &input, seenEOF: false) == nil)
        #expect(throws: IMWireError.truncatedFrame(received: 20)) { try decoder.decodeLast(buffer: &input, seenEOF: true) }
    }

    @Test("after an error the handler delivers nothing more: no resynchronisation")
    func noResync() throws {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(IMFrameDecoder()))
        var bytes = ByteBuffer(bytes: [0xDE, 0xCA, 0xFB, 0xAE] + [UInt8](repeating: 0, count: 24))
        bytes.writeImmutableBuffer(try Self.wire(.heartbeat(sequence: 1, timestamp: 0)))
        #expect(throws: IMWireError.badMagic(0xDECA_FBAE)) { try channel.writeInbound(bytes) }
        _ = try? channel.writeInbound(try Self.wire(.heartbeat(sequence: 2, timestamp: 0)))
        #expect(try channel.readInbound(as: IMFrame.self) == nil)
        _ = try? channel.finish()
    }
}
