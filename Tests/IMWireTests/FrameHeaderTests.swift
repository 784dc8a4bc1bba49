import IMWire
import NIOCore
import Testing

@Suite("Frame header")
struct FrameHeaderTests {
    @Test("28 bytes at the documented offsets, big-endian")
    func layout() throws {
        let header = IMFrameHeader(
            versionMinor: 7, type: .readReceipt, sequence: 0x0102_0304, timestamp: 0x0506_0708,
            encryptType: .seedCRC32, compressType: .zlib, sessionID: 0x090A, bodyLength: 0x0B0C_0D0E, checksum: 0x0F10_1112
        )
        var buffer = ByteBuffer()
        #expect(header.write(to: &buffer) == 28)
        #expect(Array(buffer.readableBytesView) == [
            0xDE, 0xCA, 0xFB, 0xAD, 0x01, 0x07, 0x00, 0x04, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
            0x01, 0x01, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12,
        ])
        #expect(try IMFrameHeader.read(from: &buffer) == header)
        #expect(buffer.readableBytes == 0)
    }

    @Test("an incomplete header reads as nil and consumes nothing")
    func incomplete() throws {
        var buffer = ByteBuffer()
        IMFrameHeader(type: .heartbeat, sequence: 1, timestamp: 2, sessionID: 3).write(to: &buffer)
        var partial = buffer.getSlice(at: 0, length: 27)!
        #expect(try IMFrameHeader.read(from: &partial) == nil)
        #expect(partial.readableBytes == 27)
    }

    static let refusals: [(String, Int, UInt8, IMWireError)] = [
        ("magic", 0, 0xDF, .badMagic(0xDFCA_FBAD)),
        ("version major", 4, 2, .unsupportedVersion(major: 2, minor: 0)),
        ("type", 7, 5, .unknownFrameType(5)),
        ("encrypt type", 16, 2, .unsupportedEncryption(2)),
        ("compress type", 17, 9, .unsupportedCompression(9)),
    ]

    @Test("invalid header fields are refused without consuming", arguments: refusals)
    func refusal(field: String, offset: Int, value: UInt8, expected: IMWireError) {
        var buffer = ByteBuffer()
        IMFrameHeader(type: .heartbeat, sequence: 1, timestamp: 2, sessionID: 3).write(to: &buffer)
        buffer.setInteger(value, at: offset)
        #expect(throws: expected) { try IMFrameHeader.read(from: &buffer) }
        #expect(buffer.readerIndex == 0)
        #expect(expected.isFatal)
    }

    @Test("the CRC is zlib's CRC-32: check value of \"123456789\" is 0xCBF43926")
    func crcCheckValue() {
        let frame = IMFrame(type: .data, sequence: 0, timestamp: 0, sessionID: 0, body: ByteBuffer(string: "123456789"))
        #expect(frame.header.checksum == 0xCBF4_3926)
        #expect(frame.header.bodyLength == 9)
        #expect(IMFrame(type: .data, sequence: 0, timestamp: 0, sessionID: 0).header.checksum == 0)
    }
}
