import NIOCore

/// The content of a chat message: exactly one item tagged 0x1001–0x1007.
public struct IMContent: Hashable, Sendable {
    /// The content tag, e.g. ``IMTag/text``.
    public var tag: IMTag
    /// The value: UTF-8 for text, application-defined bytes otherwise.
    public var value: ByteBuffer

    /// Creates content; `tag` must be one of 0x1001–0x1007.
    public init(tag: IMTag, value: ByteBuffer) {
        precondition(tag.isContent, "content tags are 0x1001-0x1007")
        self.tag = tag
        self.value = value
    }

    /// Text content.
    public static func text(_ text: String) -> IMContent {
        IMContent(tag: .text, value: ByteBuffer(string: text))
    }

    /// The text, if this is valid text content.
    public var text: String? {
        guard self.tag == .text else { return nil }
        return try? TLVItem(tag: .text, value: self.value).string()
    }

    /// Reads the only content item of `fields`.
    init(fields: TLVFields) throws(IMWireError) {
        var found: TLVItem? = nil
        for item in fields.items where item.tag.isContent {
            guard found == nil else { throw .invalidField(item.tag, .duplicate) }
            found = item
        }
        guard let found else { throw .missingContent }
        if found.tag == .text { _ = try found.string() }
        self.init(tag: found.tag, value: found.value)
    }

    func write(to writer: inout TLVWriter) {
        writer.write(self.tag, buffer: self.value)
    }
}
