import NIOCore

/// Reads TLV items one by one from a body or container, as slices (no copies).
///
/// Each item is a u16 tag, a u32 length and `length` value bytes, big-endian. The reader
/// refuses trailing bytes that cannot hold an item header and lengths that overrun the input.
public struct TLVReader: Sendable {
    private var buffer: ByteBuffer
    private let start: Int
    private let baseOffset: Int
    /// Nesting depth of the items read (top level: 0).
    public let depth: Int

    /// Reads the readable bytes of `buffer` as items at `depth`.
    public init(_ buffer: ByteBuffer, depth: Int = 0) {
        self.init(buffer, depth: depth, baseOffset: 0)
    }

    init(_ buffer: ByteBuffer, depth: Int, baseOffset: Int) {
        self.buffer = buffer
        self.start = buffer.readerIndex
        self.depth = depth
        self.baseOffset = baseOffset
    }

    /// The offset of the next item from the start of the body.
    public var offset: Int { self.baseOffset + self.buffer.readerIndex - self.start }

    /// The next item, or `nil` at the end of the input.
    public mutating func next() throws(IMWireError) -> TLVItem? {
        let remaining = self.buffer.readableBytes
        if remaining == 0 { return nil }
        let itemOffset = self.offset
        guard let (rawTag, length) = self.buffer.readMultipleIntegers(endianness: .big, as: (UInt16, UInt32).self)
        else { throw .malformedTLV(.truncatedItemHeader(remaining: remaining), offset: itemOffset) }
        let tag = IMTag(rawValue: rawTag)
        let left = self.buffer.readableBytes
        guard UInt64(length) <= UInt64(left), let value = self.buffer.readSlice(length: Int(length)) else {
            throw .malformedTLV(.lengthOverrun(tag: tag, length: length, remaining: left), offset: itemOffset)
        }
        return TLVItem(tag: tag, value: value, depth: self.depth, offset: itemOffset + IMWire.tlvItemHeaderLength)
    }

    /// Checks a whole body: every item well-formed, containers nested at most
    /// ``IMWire/maxTLVDepth`` deep, no trailing bytes, and no tag twice at the top level.
    public static func validate(_ body: ByteBuffer) throws(IMWireError) {
        var reader = TLVReader(body)
        var seen = TagSet()
        while let item = try reader.next() {
            guard seen.insert(item.tag) else {
                throw .malformedTLV(.duplicateTag(item.tag), offset: item.offset - IMWire.tlvItemHeaderLength)
            }
            if item.tag == .container { try validateContainer(item) }
        }
    }

    private static func validateContainer(_ container: TLVItem) throws(IMWireError) {
        guard container.depth < IMWire.maxTLVDepth else {
            throw .malformedTLV(.tooDeep(depth: container.depth + 1), offset: container.offset)
        }
        var reader = TLVReader(container.value, depth: container.depth + 1, baseOffset: container.offset)
        while let item = try reader.next() {
            if item.tag == .container { try validateContainer(item) }
        }
    }
}

/// Remembers tags seen at one level: a linear scan while small, a set beyond.
struct TagSet {
    private var small: [IMTag] = []
    private var large: Set<IMTag>? = nil

    /// Inserts `tag`; `false` if it was already present.
    mutating func insert(_ tag: IMTag) -> Bool {
        if self.large != nil { return self.large!.insert(tag).inserted }
        if self.small.contains(tag) { return false }
        self.small.append(tag)
        if self.small.count > 16 {
            self.large = Set(self.small)
            self.small = []
        }
        return true
    }
}
