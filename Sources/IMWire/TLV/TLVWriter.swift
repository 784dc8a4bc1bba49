import NIOCore

/// Writes TLV items into a ByteBuffer: tag (u16), length (u32), value, big-endian.
///
/// Containers (tag 0xFFFF) are written with ``writeContainer(_:)``, whose length is patched
/// in when the closure returns. Nesting deeper than ``IMWire/maxTLVDepth`` is a programming error.
public struct TLVWriter {
    /// The bytes written so far (plus whatever the buffer held before).
    public private(set) var buffer: ByteBuffer
    private var depth = 0

    /// Appends to `buffer`.
    public init(buffer: ByteBuffer = ByteBuffer()) {
        self.buffer = buffer
    }

    /// Appends to a new buffer of `capacity` bytes from `allocator`.
    public init(allocator: ByteBufferAllocator, capacity: Int = 256) {
        self.buffer = allocator.buffer(capacity: capacity)
    }

    /// Writes an item whose value is the readable bytes of `value`.
    public mutating func write(_ tag: IMTag, buffer value: ByteBuffer) {
        self.writeHeader(tag, length: value.readableBytes)
        self.buffer.writeImmutableBuffer(value)
    }

    /// Writes an item whose value is `bytes`.
    public mutating func write(_ tag: IMTag, bytes: some Collection<UInt8>) {
        self.writeHeader(tag, length: bytes.count)
        self.buffer.writeBytes(bytes)
    }

    /// Writes an item whose value is the UTF-8 of `string`.
    public mutating func write(_ tag: IMTag, string: String) {
        self.writeHeader(tag, length: string.utf8.count)
        self.buffer.writeString(string)
    }

    /// Writes an item whose value is a big-endian integer of the integer's own size.
    public mutating func write<T: FixedWidthInteger>(_ tag: IMTag, integer: T) {
        self.writeHeader(tag, length: MemoryLayout<T>.size)
        self.buffer.writeInteger(integer, endianness: .big)
    }

    /// Writes an IEEE 754 binary64 as its big-endian bit pattern.
    public mutating func write(_ tag: IMTag, double: Double) {
        self.write(tag, integer: double.bitPattern)
    }

    /// Writes a flag as one byte, 0 or 1.
    public mutating func write(_ tag: IMTag, flag: Bool) {
        self.write(tag, integer: UInt8(flag ? 1 : 0))
    }

    /// Writes `item` unchanged.
    public mutating func write(_ item: TLVItem) {
        self.write(item.tag, buffer: item.value)
    }

    /// Writes a container whose items are written by `body`.
    public mutating func writeContainer<E: Error>(_ body: (inout TLVWriter) throws(E) -> Void) throws(E) {
        precondition(self.depth < IMWire.maxTLVDepth, "TLV containers nest at most \(IMWire.maxTLVDepth) deep")
        let headerIndex = self.buffer.writerIndex
        self.buffer.writeMultipleIntegers(IMTag.container.rawValue, UInt32(0), endianness: .big)
        self.depth += 1
        defer { self.depth -= 1 }
        try body(&self)
        let length = self.buffer.writerIndex - headerIndex - IMWire.tlvItemHeaderLength
        precondition(length <= Int(UInt32.max), "TLV value longer than 4 GiB")
        self.buffer.setInteger(UInt32(length), at: headerIndex + 2, endianness: .big)
    }

    private mutating func writeHeader(_ tag: IMTag, length: Int) {
        precondition(length <= Int(UInt32.max), "TLV value longer than 4 GiB")
        self.buffer.writeMultipleIntegers(tag.rawValue, UInt32(length), endianness: .big)
    }
}
