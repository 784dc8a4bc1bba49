import NIOCore

/// The 28-byte frame header. All integers are big-endian.
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 4 | magic `0xDECAFBAD` |
/// | 4 | 1 | version major (1) |
/// | 5 | 1 | version minor (0) |
/// | 6 | 2 | ``type`` |
/// | 8 | 4 | ``sequence`` |
/// | 12 | 4 | ``timestamp`` |
/// | 16 | 1 | ``encryptType`` |
/// | 17 | 1 | ``compressType`` |
/// | 18 | 2 | ``sessionID`` |
/// | 20 | 4 | ``bodyLength`` |
/// | 24 | 4 | ``checksum`` |
public struct IMFrameHeader: Hashable, Sendable {
    /// Protocol major version; only ``IMWire/versionMajor`` is accepted.
    public var versionMajor: UInt8
    /// Protocol minor version; any value is accepted.
    public var versionMinor: UInt8
    /// The frame type.
    public var type: IMFrameType
    /// Chosen by the sender, per direction; an ACK carries the acknowledged frame's sequence.
    public var sequence: UInt32
    /// Unix time in seconds at the sender. Informational: never checked against the local clock.
    public var timestamp: UInt32
    /// Encryption; both values mean none.
    public var encryptType: IMEncryptType
    /// How the body is transmitted.
    public var compressType: IMCompressType
    /// The logical channel; replies echo the request's session id.
    public var sessionID: UInt16
    /// The length of the body as transmitted (after compression).
    public var bodyLength: UInt32
    /// zlib CRC-32 of the body as transmitted; 0 for an empty body.
    public var checksum: UInt32

    /// Creates a header from its fields.
    public init(
        versionMajor: UInt8 = IMWire.versionMajor,
        versionMinor: UInt8 = IMWire.versionMinor,
        type: IMFrameType,
        sequence: UInt32,
        timestamp: UInt32,
        encryptType: IMEncryptType = .none,
        compressType: IMCompressType = .none,
        sessionID: UInt16,
        bodyLength: UInt32 = 0,
        checksum: UInt32 = 0
    ) {
        self.versionMajor = versionMajor
        self.versionMinor = versionMinor
        self.type = type
        self.sequence = sequence
        self.timestamp = timestamp
        self.encryptType = encryptType
        self.compressType = compressType
        self.sessionID = sessionID
        self.bodyLength = bodyLength
        self.checksum = checksum
    }
}

extension IMFrameHeader {
    /// Reads and validates a header: magic, version major, type, encrypt type and compress type.
    ///
    /// Limits and the checksum are the decoder's business (``IMFrameDecoder``).
    /// - Returns: `nil`, leaving the reader index untouched, if fewer than 28 bytes are readable.
    /// - Throws: ``IMWireError`` for a value this protocol does not accept; the reader index is left untouched.
    public static func read(from buffer: inout ByteBuffer) throws(IMWireError) -> IMFrameHeader? {
        let start = buffer.readerIndex
        guard
            let (magic, major, minor, rawType, sequence, timestamp, rawEncrypt, rawCompress, session, length, crc) =
                buffer.readMultipleIntegers(
                    endianness: .big,
                    as: (
                        UInt32, UInt8, UInt8, UInt16, UInt32, UInt32, UInt8, UInt8, UInt16, UInt32, UInt32
                    ).self
                )
        else { return nil }
        guard magic == IMWire.magic else {
            buffer.moveReaderIndex(to: start)
            throw .badMagic(magic)
        }
        guard major == IMWire.versionMajor else {
            buffer.moveReaderIndex(to: start)
            throw .unsupportedVersion(major: major, minor: minor)
        }
        guard let type = IMFrameType(rawValue: rawType) else {
            buffer.moveReaderIndex(to: start)
            throw .unknownFrameType(rawType)
        }
        guard let encrypt = IMEncryptType(rawValue: rawEncrypt) else {
            buffer.moveReaderIndex(to: start)
            throw .unsupportedEncryption(rawEncrypt)
        }
        guard let compress = IMCompressType(rawValue: rawCompress) else {
            buffer.moveReaderIndex(to: start)
            throw .unsupportedCompression(rawCompress)
        }
        return IMFrameHeader(
            versionMajor: major,
            versionMinor: minor,
            type: type,
            sequence: sequence,
            timestamp: timestamp,
            encryptType: encrypt,
            compressType: compress,
            sessionID: session,
            bodyLength: length,
            checksum: crc
        )
    }

    /// Writes the 28 header bytes, exactly as the fields say.
    @discardableResult
    public func write(to buffer: inout ByteBuffer) -> Int {
        buffer.writeMultipleIntegers(
            IMWire.magic,
            self.versionMajor,
            self.versionMinor,
            self.type.rawValue,
            self.sequence,
            self.timestamp,
            self.encryptType.rawValue,
            self.compressType.rawValue,
            self.sessionID,
            self.bodyLength,
            self.checksum,
            endianness: .big
        )
    }
}
