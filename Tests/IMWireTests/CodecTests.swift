import IMWire
import NIOCore
import NIOEmbedded
import Testing

@Suite("Encoder, heartbeat and error frames")
struct CodecTests {
    @Test("the encoder writes length and CRC of the transmitted body")
    func encoderHeader() throws {
        let frame = ChatSend(to: "bob", messageID: "m", content: .text("hello")).frame(sequence: 3, timestamp: 1, sessionID: 2)
        let wire = try IMFrameEncoder().encode(frame)
        #expect(wire.getInteger(at: 20, as: UInt32.self) == UInt32(frame.body.readableBytes))
        #expect(wire.getInteger(at: 24, as: UInt32.self) == frame.header.checksum)
        #expect(wire.readableBytes == 28 + frame.body.readableBytes)
    }

    @Test("the encoder sends the CRC-32 of the body, whatever the header was changed to; decoded frames re-encode to the same bytes")
    func encoderChecksumSource() throws {
        let chat = ChatSend(to: "bob", messageID: "m", content: .text(String(repeating: "hello ", count: 50)))
        let frame = chat.frame(sequence: 3, timestamp: 1, sessionID: 2)
        let wire = try IMFrameEncoder().encode(frame)
        var changed = frame
        changed.header.checksum = 0xDEAD_BEEF
        changed.header.bodyLength = 7
        #expect(try IMFrameEncoder().encode(changed) == wire)

        // Plain: the decoder checked the CRC the encoder sends again.
        var decoder = IMFrameDecoder()
        var input = wire
        let plain = try #require(try decoder.decode(buffer: &input))
        #expect(plain == frame)
        #expect(plain.hashValue == frame.hashValue)
        #expect(try IMFrameEncoder().encode(plain) == wire)

        // Compressed: the header describes the compressed bytes, the body is plain.
        let zlibFrame = chat.frame(sequence: 3, timestamp: 1, sessionID: 2, compressType: .zlib)
        let zlibWire = try IMFrameEncoder(onlyIfSmaller: false).encode(zlibFrame)
        input = zlibWire
        var inflated = try #require(try decoder.decode(buffer: &input))
        #expect(inflated.header.compressType == .zlib)
        // Equal by header and body alone, whether the body's CRC is known or not.
        var rebuilt = IMFrame(header: inflated.header, body: inflated.body)
        rebuilt.header = inflated.header
        #expect(rebuilt == inflated)
        #expect(rebuilt.hashValue == inflated.hashValue)
        #expect(try IMFrameEncoder(onlyIfSmaller: false).encode(inflated) == zlibWire)
        inflated.header.compressType = .none
        #expect(try IMFrameEncoder().encode(inflated) == wire)
    }

    @Test("automatic compression above a threshold, only when it pays")
    func threshold() throws {
        let encoder = IMFrameEncoder(compressionThreshold: 100)
        let long = ChatSend(to: "bob", messageID: "m", content: .text(String(repeating: "a", count: 1000)))
            .frame(sequence: 1, timestamp: 0, sessionID: 1)
        #expect(try encoder.encode(long).getInteger(at: 17, as: UInt8.self) == 1)
        let short = ChatSend(to: "bob", messageID: "m", content: .text("a")).frame(sequence: 1, timestamp: 0, sessionID: 1)
        #expect(try encoder.encode(short).getInteger(at: 17, as: UInt8.self) == 0)
        var random = SystemRandomNumberGenerator()
        let noise = (0..<2000).map { _ in UInt8.random(in: 0...255, using: &random) }
        var writer = TLVWriter()
        writer.write(.payload, bytes: noise)
        let incompressible = IMFrame(type: .data, sequence: 1, timestamp: 0, sessionID: 1, body: writer.buffer)
        #expect(try encoder.encode(incompressible).getInteger(at: 17, as: UInt8.self) == 0)
        // An explicit request is honoured only when it pays, unless told otherwise.
        var requested = incompressible
        requested.header.compressType = .zlib
        #expect(try IMFrameEncoder().encode(requested).getInteger(at: 17, as: UInt8.self) == 0)
        #expect(try IMFrameEncoder(onlyIfSmaller: false).encode(requested).getInteger(at: 17, as: UInt8.self) == 1)
        // Without a threshold nothing is compressed unless the frame asks; empty bodies never are.
        #expect(try IMFrameEncoder().encode(long).getInteger(at: 17, as: UInt8.self) == 0)
        var empty = IMFrame.heartbeat(sequence: 1, timestamp: 0)
        empty.header.compressType = .zlib
        #expect(try IMFrameEncoder().encode(empty).getInteger(at: 17, as: UInt8.self) == 0)
    }

    @Test("the encoder refuses bodies the peer would refuse")
    func encoderLimit() {
        let frame = ChatSend(to: "bob", messageID: "m", content: .text(String(repeating: "a", count: 100)))
            .frame(sequence: 1, timestamp: 0, sessionID: 1)
        #expect(throws: IMWireError.bodyTooLarge(length: frame.header.bodyLength, limit: 50)) {
            try IMFrameEncoder(maxBodyLength: 50).encode(frame)
        }
    }

    @Test("a heartbeat is answered by an ACK echoing sequence and session id")
    func heartbeat() throws {
        let beat = IMFrame.heartbeat(sequence: 0x0100_0007, timestamp: 10, sessionID: 0x5A5A)
        let reply = try #require(IMFrame.heartbeatReply(to: beat, timestamp: 11))
        #expect(reply.header.type == .ack)
        #expect(reply.header.sequence == 0x0100_0007)
        #expect(reply.header.sessionID == 0x5A5A)
        #expect(reply.header.timestamp == 11)
        #expect(reply.body.readableBytes == 0)
        #expect(IMFrame.heartbeatReply(to: beat)?.header.timestamp == 10)
        #expect(IMFrame.heartbeatReply(to: reply) == nil)
    }

    @Test("through a NIO pipeline: heartbeat in, ACK out")
    func pipeline() throws {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandlers([
            ByteToMessageHandler(IMFrameDecoder()), MessageToByteHandler(IMFrameEncoder()),
        ])
        try channel.writeInbound(try IMFrameEncoder().encode(.heartbeat(sequence: 4, timestamp: 1, sessionID: 1)))
        let inbound = try #require(try channel.readInbound(as: IMFrame.self))
        try channel.writeOutbound(try #require(IMFrame.heartbeatReply(to: inbound, timestamp: 2)))
        let out = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(Array(out.readableBytesView) == [
            0xDE, 0xCA, 0xFB, 0xAD, 1, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0,
        ])
        #expect(try channel.finish().isClean)
    }

    static let errors: [(IMWireError, IMErrorCode)] = [
        (.badMagic(1), .badMagic), (.unsupportedVersion(major: 2, minor: 0), .unsupportedVersion),
        (.unknownFrameType(7), .unknownFrameType), (.unsupportedEncryption(2), .unsupportedEncryption),
        (.unsupportedCompression(3), .unsupportedCompression), (.bodyTooLarge(length: 9, limit: 8), .bodyTooLarge),
        (.invalidBodyLength(type: .data, compressType: .none, length: 3), .malformedFrame),
        (.badChecksum(announced: 1, computed: 2), .badChecksum), (.decompressionFailed(zlibStatus: -3), .decompressionFailed),
        (.decompressedBodyTooLarge(limit: 8), .bodyTooLarge), (.malformedTLV(.duplicateTag(.text), offset: 0), .malformedFrame),
        (.truncatedFrame(received: 3), .malformedFrame), (.unknownOperation(type: .control, operation: 9), .unknownOperation),
        (.unexpectedFrameType(expected: .data, actual: .ack), .badRequest), (.missingField(.to), .badRequest),
        (.missingContent, .badRequest), (.invalidField(.to, .invalidUTF8), .invalidUserID),
        (.invalidField(.group, .invalidIdentifier("g#1")), .invalidUserID), (.invalidField(.group, .invalidUTF8), .invalidUserID),
        (.invalidField(.group, .lengthOutOfRange(length: 65, allowed: 1...64)), .invalidUserID),
        // TO and GROUP together: a request that is not one, whatever the ids.
        (.invalidField(.group, .duplicate), .badRequest), (.invalidField(.group, .valueOutOfRange("a CHAT names TO or GROUP, not both")), .badRequest),
        (.invalidField(.qos, .valueOutOfRange("3")), .qosNotSupported), (.invalidField(.duration, .valueOutOfRange("0")), .badRequest),
        (.compressionFailed(zlibStatus: -2), .internalError),
    ]

    @Test("each error maps to its protocol code; framing errors close", arguments: errors)
    func errorCodes(error: IMWireError, code: IMErrorCode) throws {
        #expect(error.errorCode == code)
        #expect(error.isFatal == (code.rawValue < 200))
        let frame = error.errorFrame(sequence: 8, timestamp: 1, sessionID: 3, inReplyTo: 5)
        #expect(frame.header.type == .control && frame.header.sessionID == 3)
        guard case .error(let notice) = try IMMessage(frame: frame) else {
            Issue.record("not an ERROR")
            return
        }
        #expect(notice == ErrorNotice(code: code, message: error.description, refSequence: 5))
    }
}

@Suite("Compression negotiation")
struct CompressionChoiceTests {
    @Test("compress only for a peer that announced zlib, and only long bodies")
    func choose() {
        #expect(IMCompressType.choose(bodyLength: 5000, peerFeatures: [.zlib]) == .zlib)
        #expect(IMCompressType.choose(bodyLength: 5000, peerFeatures: [.pubSub]) == .none)
        #expect(IMCompressType.choose(bodyLength: 5000, peerFeatures: nil) == .none)
        #expect(IMCompressType.choose(bodyLength: 100, peerFeatures: [.zlib]) == .none)
        #expect(IMCompressType.choose(bodyLength: 100, peerFeatures: [.zlib], threshold: 64) == .zlib)
        #expect(IMCompressType.choose(bodyLength: 0, peerFeatures: [.zlib], threshold: 0) == .none)
    }
}
