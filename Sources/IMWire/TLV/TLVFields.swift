import NIOCore

/// The items of one TLV level, in order, with typed look-ups.
///
/// At the top level of a body (depth 0) every tag occurs at most once. Inside a container
/// tags may repeat: a container is a list (e.g. repeated ``IMTag/userID``) or a record.
public struct TLVFields: Hashable, Sendable {
    /// The items in wire order.
    public private(set) var items: [TLVItem]
    /// Nesting depth of these items (top level: 0).
    public let depth: Int

    /// Parses one level of items from the readable bytes of `buffer` (nested containers are
    /// parsed when opened with ``TLVItem/items()``). Rejects duplicate tags at depth 0.
    public init(parsing buffer: ByteBuffer, depth: Int = 0) throws(IMWireError) {
        try self.init(parsing: buffer, depth: depth, baseOffset: 0)
    }

    init(parsing buffer: ByteBuffer, depth: Int, baseOffset: Int) throws(IMWireError) {
        var reader = TLVReader(buffer, depth: depth, baseOffset: baseOffset)
        var items: [TLVItem] = []
        var seen = TagSet()
        while let item = try reader.next() {
            if depth == 0, !seen.insert(item.tag) {
                throw .malformedTLV(.duplicateTag(item.tag), offset: item.offset - IMWire.tlvItemHeaderLength)
            }
            items.append(item)
        }
        self.items = items
        self.depth = depth
    }

    /// The first item with `tag`, if any.
    public subscript(tag: IMTag) -> TLVItem? {
        self.items.first { $0.tag == tag }
    }

    /// Every item with `tag`, in order.
    public func all(_ tag: IMTag) -> [TLVItem] {
        self.items.filter { $0.tag == tag }
    }

    /// The only item with `tag`.
    /// - Throws: ``IMWireError/missingField(_:)`` if absent, `.invalidField(tag, .duplicate)` if repeated.
    public func required(_ tag: IMTag) throws(IMWireError) -> TLVItem {
        guard let item = try self.optional(tag) else { throw .missingField(tag) }
        return item
    }

    /// The only item with `tag`, or `nil`.
    /// - Throws: `.invalidField(tag, .duplicate)` if repeated (possible inside containers).
    public func optional(_ tag: IMTag) throws(IMWireError) -> TLVItem? {
        var found: TLVItem? = nil
        for item in self.items where item.tag == tag {
            guard found == nil else { throw .invalidField(tag, .duplicate) }
            found = item
        }
        return found
    }

    /// Items whose tag is application-defined (`0xF000–0xFFFE`), to pass through unchanged.
    public var applicationItems: [TLVItem] {
        self.items.filter { $0.tag.isApplicationDefined }
    }
}
