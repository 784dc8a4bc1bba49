import IMWire
import NIOCore

/// What makes a chat message the message it is, as a 64-bit hash: the recipient (TO), the
/// content item (tag and value) and the application-defined items (tags and values, in tag
/// order). Not MESSAGE_ID (the window's key), RESEND, QOS or the order of the items, which a
/// resend may change without making it another message (docs/PROTOCOL.md 6.3).
///
/// FNV-1a over the fields, each length-prefixed: cheap, and the same in every process and
/// run, so a value in a log can be compared with another gateway's.
public struct ChatFingerprint: Hashable, Sendable, CustomStringConvertible {
    /// The hash.
    public let rawValue: UInt64

    /// Wraps a hash.
    public init(rawValue: UInt64) { self.rawValue = rawValue }

    /// The fingerprint of `chat`.
    public init(_ chat: ChatSend) {
        var hash = FNV1a()
        // A group and a user of the same name are different recipients.
        if chat.isGroup { hash.add(IMTag.group, ByteBuffer(string: chat.to)) } else { hash.add(chat.to) }
        hash.add(chat.content.tag, chat.content.value)
        for item in chat.extensions.sorted(by: { $0.tag < $1.tag }) { hash.add(item.tag, item.value) }
        self.rawValue = hash.value
    }

    /// 16 hex digits.
    public var description: String {
        let digits = String(self.rawValue, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}

/// FNV-1a, 64 bits.
private struct FNV1a {
    private(set) var value: UInt64 = 0xcbf2_9ce4_8422_2325

    mutating func add(_ tag: IMTag, _ bytes: ByteBuffer) {
        self.add(word: UInt64(tag.rawValue))
        self.add(bytes)
    }

    /// The length, then the bytes: ("ab", "c") and ("a", "bc") differ.
    mutating func add(_ bytes: ByteBuffer) {
        self.add(word: UInt64(bytes.readableBytes))
        bytes.withUnsafeReadableBytes { raw in
            for byte in raw { self.add(byte: byte) }
        }
    }

    mutating func add(_ string: String) {
        self.add(word: UInt64(string.utf8.count))
        for byte in string.utf8 { self.add(byte: byte) }
    }

    private mutating func add(byte: UInt8) {
        self.value = (self.value ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
    }

    private mutating func add(word: UInt64) {
        for shift in stride(from: 56, through: 0, by: -8) {
            self.add(byte: UInt8(truncatingIfNeeded: word >> UInt64(shift)))
        }
    }
}
