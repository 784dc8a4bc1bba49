import IMWire
import NIOCore
import Testing

@Suite("TLV reader and writer")
struct TLVTests {
    @Test("written items read back as slices of the same storage")
    func roundTripWithoutCopies() throws {
        var writer = TLVWriter()
        writer.write(.operation, integer: UInt16(0x0040))
        writer.write(.text, string: "héllo")
        writer.write(.latitude, double: -33.5)
        writer.write(.resend, flag: true)
        writer.writeContainer { list in
            list.write(.userID, string: "bob")
            list.write(.userID, string: "carol")
        }
        let body = writer.buffer
        let fields = try TLVFields(parsing: body)
        #expect(fields.items.map(\.tag) == [.operation, .text, .latitude, .resend, .container])
        #expect(try fields.required(.operation).integer(as: UInt16.self) == 0x0040)
        #expect(try fields.required(.text).string() == "héllo")
        #expect(try fields.required(.latitude).double() == -33.5)
        #expect(try fields.required(.resend).flag())
        let users = try fields.required(.container).items().all(.userID).map { try $0.string() }
        #expect(users == ["bob", "carol"])

        // The value is a slice: it points into the body's storage.
        let text = try fields.required(.text)
        body.withUnsafeReadableBytes { whole in
            text.value.withUnsafeReadableBytes { slice in
                #expect(slice.baseAddress == whole.baseAddress! + 8 + 6)
            }
        }
    }

    @Test("byte layout: tag u16, length u32, value, big-endian")
    func layout() {
        var writer = TLVWriter()
        writer.write(.errorCode, integer: UInt16(0x0102))
        writer.writeContainer { $0.write(.retain, flag: false) }
        #expect(Array(writer.buffer.readableBytesView) == [
            0x01, 0x03, 0, 0, 0, 2, 0x01, 0x02,
            0xFF, 0xFF, 0, 0, 0, 7, 0x05, 0x02, 0, 0, 0, 1, 0,
        ])
    }

    @Test("containers nest four deep, not five")
    func depth() throws {
        func nested(_ levels: Int) -> ByteBuffer {
            var inner = ByteBuffer(bytes: [0x10, 0x01, 0, 0, 0, 1, 0x41])
            for _ in 0..<levels {
                var w = TLVWriter()
                w.write(.container, buffer: inner)
                inner = w.buffer
            }
            return inner
        }
        try TLVReader.validate(nested(4))
        #expect(throws: IMWireError.malformedTLV(.tooDeep(depth: 5), offset: 30)) {
            try TLVReader.validate(nested(5))
        }
        // Lazily opened containers enforce the same depth.
        var item = try #require(try TLVFields(parsing: nested(5)).items.first)
        for _ in 0..<4 { item = try #require(try item.items().items.first) }
        #expect(throws: IMWireError.malformedTLV(.tooDeep(depth: 5), offset: 30)) { try item.items() }
    }

    static let malformedBodies: [(String, [UInt8], IMWireError)] = [
        ("trailing byte", [0x01, 0x03, 0, 0, 0, 2, 0, 1, 0x99],
         .malformedTLV(.truncatedItemHeader(remaining: 1), offset: 8)),
        ("five trailing bytes", [0x01, 0x03, 0, 0, 0, 2, 0, 1, 1, 2, 3, 4, 5],
         .malformedTLV(.truncatedItemHeader(remaining: 5), offset: 8)),
        ("length past the end", [0x01, 0x03, 0, 0, 0, 9, 0, 1],
         .malformedTLV(.lengthOverrun(tag: .errorCode, length: 9, remaining: 2), offset: 0)),
        ("length 0xFFFFFFFF", [0x01, 0x03, 0xFF, 0xFF, 0xFF, 0xFF, 0, 1],
         .malformedTLV(.lengthOverrun(tag: .errorCode, length: .max, remaining: 2), offset: 0)),
        ("overrun inside a container", [0xFF, 0xFF, 0, 0, 0, 6, 0x01, 0x02, 0, 0, 0, 1],
         .malformedTLV(.lengthOverrun(tag: .userID, length: 1, remaining: 0), offset: 6)),
        ("duplicate top-level tag", [0x01, 0x03, 0, 0, 0, 0, 0x01, 0x03, 0, 0, 0, 0],
         .malformedTLV(.duplicateTag(.errorCode), offset: 6)),
        ("two top-level containers", [0xFF, 0xFF, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0, 0, 0],
         .malformedTLV(.duplicateTag(.container), offset: 6)),
    ]

    @Test("malformed bodies are refused with the offending values", arguments: malformedBodies)
    func malformed(name: String, bytes: [UInt8], expected: IMWireError) {
        #expect(throws: expected) { try TLVReader.validate(ByteBuffer(bytes: bytes)) }
        #expect(expected.errorCode == .malformedFrame)
    }

    @Test("tags may repeat inside containers, and many distinct top-level tags are fine")
    func duplicatesPolicy() throws {
        var writer = TLVWriter()
        writer.writeContainer { list in
            for _ in 0..<3 { list.write(.userID, string: "x") }
        }
        for raw in UInt16(0xF000)..<0xF040 { writer.write(IMTag(raw), bytes: []) }
        try TLVReader.validate(writer.buffer)
        var twice = writer
        twice.write(IMTag(0xF020), bytes: [1])
        #expect(throws: IMWireError.malformedTLV(.duplicateTag(IMTag(0xF020)), offset: twice.buffer.readableBytes - 7)) {
            try TLVReader.validate(twice.buffer)
        }
    }

    @Test("typed accessors check sizes, UTF-8 and flags")
    func accessors() throws {
        let short = TLVItem(tag: .serverTime, value: ByteBuffer(bytes: [1, 2, 3, 4]))
        #expect(throws: IMWireError.invalidField(.serverTime, .wrongLength(expected: 8, actual: 4))) {
            try short.integer(as: UInt64.self)
        }
        let badUTF8 = TLVItem(tag: .text, value: ByteBuffer(bytes: [0x68, 0xC3, 0x28]))
        #expect(throws: IMWireError.invalidField(.text, .invalidUTF8)) { try badUTF8.string() }
        let flag = TLVItem(tag: .retain, value: ByteBuffer(bytes: [2]))
        #expect(throws: IMWireError.invalidField(.retain, .valueOutOfRange("2"))) { try flag.flag() }
        let notContainer = TLVItem(tag: .text, value: ByteBuffer())
        #expect(throws: IMWireError.invalidField(.text, .notAContainer)) { try notContainer.items() }
        let id = TLVItem(tag: .userID, value: ByteBuffer(string: "a+b"))
        #expect(throws: IMWireError.invalidField(.userID, .invalidIdentifier("a+b"))) { try id.identifier() }
    }

    @Test("the tag catalogue names every tag with a value type")
    func catalogue() {
        #expect(IMTag.operation.name == "OP")
        #expect(IMTag.operation.valueType == .u16)
        #expect(IMTag(0xF123).isApplicationDefined)
        #expect(!IMTag.container.isApplicationDefined)
        #expect(IMTag(0xF123).valueType == .bytes)
        #expect(IMTag.allKnown.contains(.container))
        #expect(IMTag.authToken.description == "AUTH_TOKEN (0x0100)")
    }
}

@Suite("UTF8Text")
struct UTF8TextTests {
    @Test("ASCII, multi-byte text and every invalid sequence kind, at every length around the word size")
    func decode() {
        for length in 0..<20 {
            let ascii = Array(repeating: UInt8(ascii: "a"), count: length)
            #expect(ascii.withUnsafeBytes { UTF8Text.decode($0) } == String(repeating: "a", count: length))
            // A non-ASCII character at the end, and an invalid byte at the end.
            let accented = ascii + Array("é".utf8)
            #expect(accented.withUnsafeBytes { UTF8Text.decode($0) } == String(repeating: "a", count: length) + "é")
            for invalid: [UInt8] in [[0xFF], [0xC3], [0xE2, 0x82], [0xED, 0xA0, 0x80], [0xC0, 0xAF]] {
                #expect((ascii + invalid).withUnsafeBytes { UTF8Text.decode($0) } == nil)
            }
        }
    }
}
