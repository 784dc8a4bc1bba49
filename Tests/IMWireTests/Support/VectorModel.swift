import Foundation
import IMWire
import NIOCore

/// The machine-readable test vectors, `Fixtures/vectors.json`.
struct VectorFile: Codable, Equatable, Sendable {
    var format: String
    var note: String
    var vectors: [FrameVector]
    var malformed: [MalformedVector]
}

/// A valid frame: its bytes and its decoded fields.
struct FrameVector: Codable, Equatable, Sendable {
    var name: String
    var section: String
    var title: String
    var direction: String
    var description: String
    /// The typed encoder writes exactly these bytes (false for accepted seed forms and zlib output).
    var canonical: Bool
    var hex: String
    var header: VectorHeader
    /// The plain (decompressed) body's items; `nil` when the body is not TLV (seed ACK).
    var items: [VectorItem]?
    /// The plain body as hex when it is not TLV.
    var rawBody: String?
}

/// A frame the receiver refuses, and the error code it answers with.
struct MalformedVector: Codable, Equatable, Sendable {
    var name: String
    var title: String
    var description: String
    var hex: String
    /// `frame`: the decoder refuses it (fatal); `message`: well-framed, the message is refused.
    var stage: String
    var errorCode: UInt16
    var errorName: String
    var closesConnection: Bool
    var detail: String
}

struct VectorHeader: Codable, Equatable, Sendable {
    var versionMajor: UInt8
    var versionMinor: UInt8
    var type: UInt16
    var typeName: String
    var sequence: UInt32
    var timestamp: UInt32
    var encrypt: UInt8
    var compress: UInt8
    var session: UInt16
    var bodyLength: UInt32
    var crc32: String
}

/// One TLV item with its value decoded according to its tag's value type.
struct VectorItem: Codable, Equatable, Sendable {
    var tag: String
    var name: String
    var type: String
    var value: Value?
    var items: [VectorItem]?

    enum Value: Equatable, Sendable {
        case unsigned(UInt64)
        case signed(Int64)
        case double(Double)
        case string(String)
        case version(major: UInt8, minor: UInt8, features: UInt16)
    }

    struct VersionValue: Codable, Equatable, Sendable {
        var major: UInt8
        var minor: UInt8
        var features: UInt16
    }

    enum CodingKeys: String, CodingKey { case tag, name, type, value, items }

    init(tag: String, name: String, type: String, value: Value?, items: [VectorItem]?) {
        self.tag = tag
        self.name = name
        self.type = type
        self.value = value
        self.items = items
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.tag = try c.decode(String.self, forKey: .tag)
        self.name = try c.decode(String.self, forKey: .name)
        self.type = try c.decode(String.self, forKey: .type)
        self.items = try c.decodeIfPresent([VectorItem].self, forKey: .items)
        switch IMTag.ValueType(rawValue: self.type) {
        case .u8, .u16, .u32, .u64: self.value = .unsigned(try c.decode(UInt64.self, forKey: .value))
        case .i32: self.value = .signed(try c.decode(Int64.self, forKey: .value))
        case .f64: self.value = .double(try c.decode(Double.self, forKey: .value))
        case .utf8, .bytes: self.value = .string(try c.decode(String.self, forKey: .value))
        case .version:
            let v = try c.decode(VersionValue.self, forKey: .value)
            self.value = .version(major: v.major, minor: v.minor, features: v.features)
        case .container, nil: self.value = nil
        }
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(self.tag, forKey: .tag)
        try c.encode(self.name, forKey: .name)
        try c.encode(self.type, forKey: .type)
        try c.encodeIfPresent(self.items, forKey: .items)
        switch self.value {
        case .unsigned(let v): try c.encode(v, forKey: .value)
        case .signed(let v): try c.encode(v, forKey: .value)
        case .double(let v): try c.encode(v, forKey: .value)
        case .string(let v): try c.encode(v, forKey: .value)
        case .version(let major, let minor, let features):
            try c.encode(VersionValue(major: major, minor: minor, features: features), forKey: .value)
        case nil: break
        }
    }
}

// MARK: - Frames to and from vector fields

enum VectorError: Error, CustomStringConvertible {
    case badHex(String)
    case badTag(String)
    case badValue(String)

    var description: String {
        switch self {
        case .badHex(let s): "bad hex \(s.prefix(16))..."
        case .badTag(let s): "bad tag \(s)"
        case .badValue(let s): "bad value for \(s)"
        }
    }
}

extension VectorHeader {
    init(_ header: IMFrameHeader) {
        self.init(
            versionMajor: header.versionMajor,
            versionMinor: header.versionMinor,
            type: header.type.rawValue,
            typeName: header.type.description,
            sequence: header.sequence,
            timestamp: header.timestamp,
            encrypt: header.encryptType.rawValue,
            compress: header.compressType.rawValue,
            session: header.sessionID,
            bodyLength: header.bodyLength,
            crc32: "0x" + hexString(header.checksum, width: 8)
        )
    }
}

extension VectorItem {
    /// Decodes the items of one level, recursively.
    static func items(_ body: ByteBuffer, depth: Int = 0) throws -> [VectorItem] {
        var reader = TLVReader(body, depth: depth)
        var result: [VectorItem] = []
        while let item = try reader.next() { result.append(try VectorItem(item, depth: depth)) }
        return result
    }

    init(_ item: TLVItem, depth: Int) throws {
        let type = item.tag.valueType
        let name = item.tag.name ?? (item.tag.isApplicationDefined ? "APP" : "UNKNOWN")
        let value: Value?
        var items: [VectorItem]? = nil
        switch type {
        case .u8: value = .unsigned(UInt64(try item.integer(as: UInt8.self)))
        case .u16: value = .unsigned(UInt64(try item.integer(as: UInt16.self)))
        case .u32: value = .unsigned(UInt64(try item.integer(as: UInt32.self)))
        case .u64: value = .unsigned(try item.integer(as: UInt64.self))
        case .i32: value = .signed(Int64(try item.integer(as: Int32.self)))
        case .f64: value = .double(try item.double())
        case .utf8: value = .string(try item.string())
        case .bytes: value = .string(hexString(item.value))
        case .version:
            let (version, features) = try item.versionAndFeatures()
            value = .version(major: version.major, minor: version.minor, features: features.rawValue)
        case .container:
            value = nil
            items = try VectorItem.items(item.value, depth: depth + 1)
        }
        self.init(tag: "0x" + hexString(item.tag.rawValue, width: 4), name: name, type: type.rawValue, value: value, items: items)
    }

    /// Writes this item (and its children) with `writer`.
    func write(to writer: inout TLVWriter) throws {
        guard self.tag.hasPrefix("0x"), let raw = UInt16(self.tag.dropFirst(2), radix: 16) else {
            throw VectorError.badTag(self.tag)
        }
        let tag = IMTag(raw)
        switch (IMTag.ValueType(rawValue: self.type), self.value) {
        case (.container, _):
            try writer.writeContainer { (inner: inout TLVWriter) throws in
                for child in self.items ?? [] { try child.write(to: &inner) }
            }
        case (.u8, .unsigned(let v)): writer.write(tag, integer: UInt8(v))
        case (.u16, .unsigned(let v)): writer.write(tag, integer: UInt16(v))
        case (.u32, .unsigned(let v)): writer.write(tag, integer: UInt32(v))
        case (.u64, .unsigned(let v)): writer.write(tag, integer: v)
        case (.i32, .signed(let v)): writer.write(tag, integer: Int32(v))
        case (.f64, .double(let v)): writer.write(tag, double: v)
        case (.utf8, .string(let v)): writer.write(tag, string: v)
        case (.bytes, .string(let v)): writer.write(tag, bytes: try bytes(fromHex: v))
        case (.version, .version(let major, let minor, let features)):
            writer.write(tag, version: IMProtocolVersion(major: major, minor: minor), features: IMFeatures(rawValue: features))
        default: throw VectorError.badValue(self.tag)
        }
    }
}

extension FrameVector {
    /// The vector's fields, from a decoded frame and its wire bytes.
    init(
        name: String,
        section: String,
        title: String,
        direction: String,
        description: String,
        canonical: Bool,
        wire: ByteBuffer,
        decoded frame: IMFrame
    ) throws {
        let isTLV = !(frame.header.type == .ack && frame.body.readableBytes == 4)
        self.init(
            name: name,
            section: section,
            title: title,
            direction: direction,
            description: description,
            canonical: canonical,
            hex: hexString(wire),
            header: VectorHeader(frame.header),
            items: isTLV ? try VectorItem.items(frame.body) : nil,
            rawBody: isTLV ? nil : hexString(frame.body)
        )
    }

    /// The plain body rebuilt from the vector's fields alone.
    func plainBody() throws -> ByteBuffer {
        if let rawBody { return ByteBuffer(bytes: try bytes(fromHex: rawBody)) }
        var writer = TLVWriter()
        for item in self.items ?? [] { try item.write(to: &writer) }
        return writer.buffer
    }

    /// The frame rebuilt from the vector's fields alone (header values other than length and CRC).
    func frame() throws -> IMFrame {
        guard let type = IMFrameType(rawValue: self.header.type),
            let encrypt = IMEncryptType(rawValue: self.header.encrypt),
            let compress = IMCompressType(rawValue: self.header.compress)
        else { throw VectorError.badValue("header") }
        let header = IMFrameHeader(
            versionMajor: self.header.versionMajor,
            versionMinor: self.header.versionMinor,
            type: type,
            sequence: self.header.sequence,
            timestamp: self.header.timestamp,
            encryptType: encrypt,
            compressType: compress,
            sessionID: self.header.session
        )
        return IMFrame(header: header, body: try self.plainBody())
    }
}
