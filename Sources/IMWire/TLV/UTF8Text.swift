/// UTF-8 text from bytes, validated.
public enum UTF8Text {
    /// The bytes as a `String`, or `nil` when they are not valid UTF-8.
    ///
    /// ASCII, what identifiers, topics and JSON keys almost always are, is recognised a
    /// word at a time and copied as it is; only other text goes through the standard
    /// library's validation, whose generic entry point is not specialised for callers.
    @inlinable
    public static func decode(_ bytes: UnsafeRawBufferPointer) -> String? {
        if isASCII(bytes) { return String(decoding: bytes, as: UTF8.self) }
        return String(validating: bytes, as: UTF8.self)
    }

    @usableFromInline
    static func isASCII(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let count = bytes.count
        var index = 0
        while index + 8 <= count {
            if bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self) & 0x8080_8080_8080_8080 != 0 { return false }
            index += 8
        }
        while index < count {
            if bytes[index] >= 0x80 { return false }
            index += 1
        }
        return true
    }
}
