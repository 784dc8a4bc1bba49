import NIOCore

/// One TLV item: tag, and its value as a slice of the body (no copy).
public struct TLVItem: Hashable, Sendable {
    /// The tag.
    public var tag: IMTag
    /// The value bytes, a slice sharing the body's storage.
    public var value: ByteBuffer
    /// Nesting depth of this item (top level: 0).
    var depth: Int
    /// Offset of the value from the start of the body, for error reports.
    var offset: Int

    /// Creates an item, e.g. an application-defined item to pass through.
    public init(tag: IMTag, value: ByteBuffer) {
        self.init(tag: tag, value: value, depth: 0, offset: 0)
    }

    init(tag: IMTag, value: ByteBuffer, depth: Int, offset: Int) {
        self.tag = tag
        self.value = value
        self.depth = depth
        self.offset = offset
    }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.tag == rhs.tag && lhs.value == rhs.value }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.tag)
        hasher.combine(self.value)
    }
}

extension TLVItem {
    /// The value as a big-endian integer whose size must match the value length exactly.
    public func integer<T: FixedWidthInteger>(as: T.Type = T.self) throws(IMWireError) -> T {
        let size = MemoryLayout<T>.size
        guard self.value.readableBytes == size,
            let result = self.value.getInteger(at: self.value.readerIndex, endianness: .big, as: T.self)
        else { throw .invalidField(self.tag, .wrongLength(expected: size, actual: self.value.readableBytes)) }
        return result
    }

    /// The value as an IEEE 754 binary64 (8 bytes, big-endian bit pattern).
    public func double() throws(IMWireError) -> Double {
        Double(bitPattern: try self.integer(as: UInt64.self))
    }

    /// The value as a boolean flag: one byte, 0 or 1.
    public func flag() throws(IMWireError) -> Bool {
        switch try self.integer(as: UInt8.self) {
        case 0: return false
        case 1: return true
        case let other: throw .invalidField(self.tag, .valueOutOfRange(String(other)))
        }
    }

    /// The value as UTF-8 text, validated.
    public func string() throws(IMWireError) -> String {
        let decoded = self.value.withUnsafeReadableBytes { UTF8Text.decode($0) }
        guard let decoded else { throw .invalidField(self.tag, .invalidUTF8) }
        return decoded
    }

    /// The value as UTF-8 text whose byte length lies in `allowed`.
    public func string(length allowed: ClosedRange<Int>) throws(IMWireError) -> String {
        guard allowed.contains(self.value.readableBytes) else {
            throw .invalidField(self.tag, .lengthOutOfRange(length: self.value.readableBytes, allowed: allowed))
        }
        return try self.string()
    }

    /// The items of this container (tag 0xFFFF), one level down.
    public func items() throws(IMWireError) -> TLVFields {
        guard self.tag == .container else { throw .invalidField(self.tag, .notAContainer) }
        guard self.depth < IMWire.maxTLVDepth else {
            throw .malformedTLV(.tooDeep(depth: self.depth + 1), offset: self.offset)
        }
        return try TLVFields(parsing: self.value, depth: self.depth + 1, baseOffset: self.offset)
    }
}
