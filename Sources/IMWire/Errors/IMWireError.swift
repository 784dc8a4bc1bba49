/// Every error of the IMWire layer, carrying the offending values.
///
/// Framing errors (``isFatal``) leave the byte stream unusable: the receiver sends a CONTROL
/// ERROR frame (``errorFrame(sequence:timestamp:sessionID:inReplyTo:)``) and closes the
/// connection. Message errors concern one well-framed frame and are answered without closing.
public enum IMWireError: Error, Hashable, Sendable {
    // MARK: Framing (fatal)

    /// The first four bytes are not `0xDECAFBAD`.
    case badMagic(UInt32)
    /// The version major is not 1.
    case unsupportedVersion(major: UInt8, minor: UInt8)
    /// The header type is not one of ``IMFrameType``.
    case unknownFrameType(UInt16)
    /// The encrypt type is neither 0 nor 1 (2, AES, is not implemented).
    case unsupportedEncryption(UInt8)
    /// The compress type is unknown, or zlib while compression is not accepted.
    case unsupportedCompression(UInt8)
    /// The announced body length is above the configured limit; refused before any body byte is read.
    case bodyTooLarge(length: UInt32, limit: Int)
    /// The announced body length cannot hold a valid body of this frame (see ``IMFrameDecoder``).
    case invalidBodyLength(type: IMFrameType, compressType: IMCompressType, length: UInt32)
    /// The CRC-32 in the header does not match the body as transmitted.
    case badChecksum(announced: UInt32, computed: UInt32)
    /// The compressed body is not exactly one valid zlib stream.
    case decompressionFailed(zlibStatus: Int32)
    /// The compressed body inflates beyond the body limit (a zip bomb).
    case decompressedBodyTooLarge(limit: Int)
    /// The body is not well-formed TLV; `offset` is counted from the start of the (plain) body.
    case malformedTLV(TLVViolation, offset: Int)
    /// The stream ended inside a frame.
    case truncatedFrame(received: Int)

    // MARK: Message (not fatal)

    /// The frame's operation is unknown for its frame type (`operation` is `nil` when absent and not implied).
    case unknownOperation(type: IMFrameType, operation: UInt16?)
    /// A well-formed frame was decoded as a message of another frame type.
    case unexpectedFrameType(expected: IMFrameType, actual: IMFrameType)
    /// A well-formed frame was decoded as a message of another operation.
    case unexpectedOperation(expected: IMOperation, actual: IMOperation)
    /// A required item is missing.
    case missingField(IMTag)
    /// A chat message carries no content item (0x1001–0x1007).
    case missingContent
    /// An item's value is not valid for its tag.
    case invalidField(IMTag, FieldViolation)

    // MARK: Local

    /// zlib failed to compress an outbound body.
    case compressionFailed(zlibStatus: Int32)

    /// How a TLV body is malformed.
    public enum TLVViolation: Hashable, Sendable {
        /// Fewer than 6 bytes remain where an item header is expected (trailing garbage).
        case truncatedItemHeader(remaining: Int)
        /// An item's length runs past the end of its body or container.
        case lengthOverrun(tag: IMTag, length: UInt32, remaining: Int)
        /// A container nests deeper than ``IMWire/maxTLVDepth``.
        case tooDeep(depth: Int)
        /// A tag occurs twice at the top level.
        case duplicateTag(IMTag)
    }

    /// Why an item's value is invalid.
    public enum FieldViolation: Hashable, Sendable {
        /// The value has the wrong length for its type.
        case wrongLength(expected: Int, actual: Int)
        /// The value's length is outside the allowed range.
        case lengthOutOfRange(length: Int, allowed: ClosedRange<Int>)
        /// The value is not valid UTF-8.
        case invalidUTF8
        /// The value is outside its allowed range (an enum, a coordinate, a QoS...).
        case valueOutOfRange(String)
        /// An identifier contains a character that is not allowed (`/`, `+`, `#`, NUL).
        case invalidIdentifier(String)
        /// The item was expected to be a container (tag 0xFFFF) or an item inside one.
        case notAContainer
        /// The item occurs more often than allowed.
        case duplicate
    }
}

extension IMWireError {
    /// Whether the connection must be closed: the frame stream can no longer be trusted.
    public var isFatal: Bool {
        switch self {
        case .badMagic, .unsupportedVersion, .unknownFrameType, .unsupportedEncryption,
            .unsupportedCompression, .bodyTooLarge, .invalidBodyLength, .badChecksum,
            .decompressionFailed, .decompressedBodyTooLarge, .malformedTLV, .truncatedFrame:
            true
        case .unknownOperation, .unexpectedFrameType, .unexpectedOperation, .missingField, .missingContent,
            .invalidField, .compressionFailed:
            false
        }
    }
}

extension IMWireError: CustomStringConvertible {
    /// A short English description, used as the error message (tag 0x0104) of error frames.
    public var description: String {
        switch self {
        case .badMagic(let magic): "bad magic 0x\(hex(magic, 8))"
        case .unsupportedVersion(let major, let minor): "unsupported version \(major).\(minor)"
        case .unknownFrameType(let type): "unknown frame type \(type)"
        case .unsupportedEncryption(let type): "unsupported encrypt type \(type)"
        case .unsupportedCompression(let type): "unsupported compress type \(type)"
        case .bodyTooLarge(let length, let limit): "body length \(length) above limit \(limit)"
        case .invalidBodyLength(let type, let compress, let length):
            "body length \(length) invalid for \(type)\(compress == .zlib ? " (zlib)" : "")"
        case .badChecksum(let announced, let computed):
            "bad CRC32: header 0x\(hex(announced, 8)), body 0x\(hex(computed, 8))"
        case .decompressionFailed(let status): "zlib inflate failed (status \(status))"
        case .decompressedBodyTooLarge(let limit): "body inflates beyond limit \(limit)"
        case .malformedTLV(let violation, let offset): "malformed TLV at body offset \(offset): \(violation)"
        case .truncatedFrame(let received): "stream ended inside a frame (\(received) bytes pending)"
        case .unknownOperation(let type, let op):
            "unknown operation \(op.map { "0x\(hex($0, 4))" } ?? "(none)") in \(type)"
        case .unexpectedFrameType(let expected, let actual): "expected \(expected), got \(actual)"
        case .unexpectedOperation(let expected, let actual): "expected \(expected), got \(actual)"
        case .missingField(let tag): "missing \(tag)"
        case .missingContent: "missing content item (0x1001-0x1007)"
        case .invalidField(let tag, let violation): "invalid \(tag): \(violation)"
        case .compressionFailed(let status): "zlib deflate failed (status \(status))"
        }
    }
}

extension IMWireError.TLVViolation: CustomStringConvertible {
    /// A short English description.
    public var description: String {
        switch self {
        case .truncatedItemHeader(let remaining): "\(remaining) trailing byte(s), not an item header"
        case .lengthOverrun(let tag, let length, let remaining):
            "item \(tag) length \(length) exceeds the \(remaining) byte(s) left"
        case .tooDeep(let depth): "container nesting depth \(depth) above \(IMWire.maxTLVDepth)"
        case .duplicateTag(let tag): "duplicate top-level \(tag)"
        }
    }
}

extension IMWireError.FieldViolation: CustomStringConvertible {
    /// A short English description.
    public var description: String {
        switch self {
        case .wrongLength(let expected, let actual): "length \(actual), expected \(expected)"
        case .lengthOutOfRange(let length, let allowed):
            "length \(length) outside \(allowed.lowerBound)...\(allowed.upperBound)"
        case .invalidUTF8: "not UTF-8"
        case .valueOutOfRange(let value): "value \(value) out of range"
        case .invalidIdentifier(let value): "identifier \"\(value)\" contains / + # or NUL"
        case .notAContainer: "not a container"
        case .duplicate: "duplicate"
        }
    }
}

/// Upper-case hexadecimal, zero-padded to `width` digits.
func hex<T: BinaryInteger>(_ value: T, _ width: Int) -> String {
    let digits = String(value, radix: 16, uppercase: true)
    return String(repeating: "0", count: max(0, width - digits.count)) + digits
}
