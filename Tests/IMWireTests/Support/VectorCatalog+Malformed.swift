import IMWire
import NIOCore

extension VectorCatalog {
    // MARK: Malformed

    /// A raw frame with arbitrary header values.
    static func raw(
        magic: UInt32 = IMWire.magic,
        major: UInt8 = 1,
        type: UInt16,
        sequence: UInt32 = 3,
        encrypt: UInt8 = 0,
        compress: UInt8 = 0,
        body: ByteBuffer = ByteBuffer(),
        length: UInt32? = nil,
        crc: UInt32? = nil,
        withBody: Bool = true
    ) -> ByteBuffer {
        let checksum = IMFrame(type: .data, sequence: 0, timestamp: 0, sessionID: 0, body: body).header.checksum
        var out = ByteBuffer()
        out.writeMultipleIntegers(
            magic, major, UInt8(0), type, sequence, time, encrypt, compress, UInt16(1),
            length ?? UInt32(body.readableBytes), crc ?? checksum, endianness: .big
        )
        if withBody { out.writeImmutableBuffer(body) }
        return out
    }

    static func tlv(_ write: (inout TLVWriter) -> Void) -> ByteBuffer {
        var writer = TLVWriter()
        write(&writer)
        return writer.buffer
    }

    static func compressed(_ body: ByteBuffer) -> ByteBuffer {
        let frame = IMFrame(type: .data, sequence: 0, timestamp: 0, sessionID: 0, body: body, compressType: .zlib)
        var wire = try! IMFrameEncoder(onlyIfSmaller: false).encode(frame)
        wire.moveReaderIndex(forwardBy: IMWire.headerLength)
        return wire
    }

    static var malformed: [Malformed] {
        let chat = ChatSend(to: "bob", messageID: "m-0001", content: .text("hi")).body()
        let chatCRC = IMFrame(type: .data, sequence: 0, timestamp: 0, sessionID: 0, body: chat).header.checksum
        var deep = tlv { $0.write(.text, string: "x") }
        for _ in 0..<5 { let inner = deep; deep = tlv { $0.write(.container, buffer: inner) } }
        var overrun = tlv { $0.write(.operation, integer: UInt16(0x0040)) }
        overrun.setInteger(UInt32(200), at: 2, endianness: .big)
        var trailing = chat
        trailing.writeBytes([0x01, 0x00, 0x00])
        let duplicate = tlv { $0.write(.operation, integer: UInt16(0x0020)); $0.write(.operation, integer: UInt16(0x0021)) }
        let bomb = compressed(tlv { $0.write(.text, bytes: Array(repeating: UInt8(ascii: "A"), count: 1 << 20)) })
        var zlibTrailing = compressed(chat)
        zlibTrailing.writeBytes([0xDE, 0xAD])
        let notZlib = ByteBuffer(string: "not a zlib stream")
        func frame(_ name: String, _ title: String, _ description: String, _ wire: ByteBuffer, _ code: IMErrorCode) -> Malformed {
            Malformed(name: name, title: title, description: description, wire: wire, stage: "frame", expected: code)
        }
        func message(_ name: String, _ title: String, _ description: String, _ body: ByteBuffer, type: IMFrameType, _ code: IMErrorCode) -> Malformed {
            Malformed(name: name, title: title, description: description, wire: raw(type: type.rawValue, body: body), stage: "message", expected: code)
        }
        return [
            frame("bad-magic", "Bad magic", "Magic 0xCAFEBABE instead of 0xDECAFBAD.", raw(magic: 0xCAFE_BABE, type: 1), .badMagic),
            frame("bad-version", "Version major 2", "Only major version 1 exists.", raw(major: 2, type: 1), .unsupportedVersion),
            frame("unknown-type", "Unknown frame type", "Type 9.", raw(type: 9), .unknownFrameType),
            frame("aes", "AES encryption", "Encrypt type 2 is not implemented.", raw(type: 1, encrypt: 2), .unsupportedEncryption),
            frame("unknown-compression", "Unknown compress type", "Compress type 2.", raw(type: 0, compress: 2, body: chat), .unsupportedCompression),
            frame("body-too-large", "Announced body over the limit", "The header alone announces 1 MiB + 1 bytes: refused at once, before any body byte.",
                  raw(type: 0, length: (1 << 20) + 1, withBody: false), .bodyTooLarge),
            frame("body-too-short", "Impossible body length", "DATA with a 3-byte body: too short for one item header.",
                  raw(type: 0, body: ByteBuffer(bytes: [1, 2, 3])), .malformedFrame),
            frame("heartbeat-with-body", "HEARTBEAT with a body", "A heartbeat's body is empty.",
                  raw(type: 1, body: tlv { $0.write(.text, string: "x") }), .malformedFrame),
            frame("bad-crc", "Bad CRC", "The CRC field does not match the body.", raw(type: 0, body: chat, crc: 0x0BAD_0BAD), .badChecksum),
            frame("crc-little-endian", "CRC in little-endian order", "The seed mock server's bug: the CRC bytes in host (little-endian) order.",
                  raw(type: 0, body: chat, crc: chatCRC.byteSwapped), .badChecksum),
            frame("tlv-overrun", "Item length past the body", "OP announces 200 bytes; 2 remain.", raw(type: 3, body: overrun), .malformedFrame),
            frame("tlv-trailing", "Trailing bytes after the last item", "Three bytes cannot hold an item header.", raw(type: 0, body: trailing), .malformedFrame),
            frame("tlv-too-deep", "Containers nested five deep", "Items may be nested at most four deep.", raw(type: 0, body: deep), .malformedFrame),
            frame("tlv-duplicate", "Duplicate top-level tag", "OP twice at the top level.", raw(type: 3, body: duplicate), .malformedFrame),
            frame("zlib-garbage", "Compressed body that is not zlib", "Compress type 1, body not a zlib stream.",
                  raw(type: 0, compress: 1, body: notZlib), .decompressionFailed),
            frame("zlib-trailing", "Bytes after the zlib stream", "The body must be exactly one zlib stream.",
                  raw(type: 0, compress: 1, body: zlibTrailing), .decompressionFailed),
            frame("zlib-bomb", "Body inflating past the limit", "About 1 KiB inflating to 1 MiB + 6 bytes: refused once the limit is reached.",
                  raw(type: 0, compress: 1, body: bomb), .bodyTooLarge),
            message("unknown-operation", "Unknown operation", "CONTROL with OP 0x0777.",
                    tlv { $0.write(.operation, integer: UInt16(0x0777)) }, type: .control, .unknownOperation),
            message("no-operation", "CONTROL without an operation", "Neither OP nor an item implying one.",
                    tlv { $0.write(.errorMessage, string: "?") }, type: .control, .unknownOperation),
            message("chat-without-message-id", "Chat without MESSAGE_ID", "A required item is missing.",
                    tlv { $0.write(.to, string: "bob"); $0.write(.text, string: "hi") }, type: .data, .badRequest),
            message("chat-without-content", "Chat without content", "No item 0x1001-0x1007.",
                    tlv { $0.write(.to, string: "bob"); $0.write(.messageID, string: "m-1") }, type: .data, .badRequest),
            message("chat-invalid-recipient", "Invalid recipient id", "TO `bob/x` contains `/`.",
                    tlv { $0.write(.to, string: "bob/x"); $0.write(.messageID, string: "m-1"); $0.write(.text, string: "hi") }, type: .data, .invalidUserID),
            message("token-refresh-without-token", "TOKEN_REFRESH without AUTH_TOKEN", "A required item is missing; the connection stays open.",
                    tlv { $0.write(.operation, integer: UInt16(0x0015)) }, type: .control, .badRequest),
            message("sync-offset-without-epoch", "SYNC with STREAM_OFFSET alone", "A position needs its epoch: BAD_REQUEST; the connection stays open.",
                    tlv { $0.write(.operation, integer: UInt16(0x0016)); $0.write(.streamOffset, integer: UInt64(42)) }, type: .control, .badRequest),
            message("subscribe-qos-3", "QoS 3", "QOS must be 0, 1 or 2.",
                    tlv { w in
                        w.write(.operation, integer: UInt16(0x0040))
                        w.writeContainer { $0.writeContainer { r in r.write(.topic, string: "im/t/a"); r.write(.qos, integer: UInt8(3)) } }
                    }, type: .control, .qosNotSupported),
            message("wrong-integer-size", "Integer of the wrong size", "ERROR_CODE (u16) carried in 4 bytes.",
                    tlv { $0.write(.operation, integer: UInt16(0x0013)); $0.write(.errorCode, integer: UInt32(207)) }, type: .control, .badRequest),
        ]
    }
}
