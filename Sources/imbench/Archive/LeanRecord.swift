/// The message archive's lean schema as RocksDB records, five per one-to-one message. A key
/// starts with a byte naming its record and carries its numbers big-endian, so that keys sort
/// as the numbers do; a name in a key ends with a 0 byte (no name holds one), so that the keys
/// of one name are never taken for those of a longer name that starts the same.
///
/// - message: `m` conversation `\0` sequence → ``Message`` (sender, message id, fingerprint,
///   server time, body);
/// - stream entry: `e` stream `\0` offset → ``Entry`` (conversation, sequence, origin): one in
///   the recipient's stream, one in the sender's (with the sending device as origin);
/// - conversation summary: `c` user `\0` peer → ``Summary`` (last offset, last sequence, server
///   time, unread count), one per side, overwritten by each message (an upsert).
///
/// A conversation is named by its two users' names in byte order, joined by a 0 byte.
/// Values hold names with a one-byte length (255 bytes at most); numbers are big-endian.
enum LeanRecord {
    static let messageTag = UInt8(ascii: "m")
    static let entryTag = UInt8(ascii: "e")
    static let summaryTag = UInt8(ascii: "c")

    /// A one-to-one conversation: its two users in byte order.
    struct Conversation: Hashable, Sendable {
        let low: String
        let high: String

        /// The conversation between `a` and `b`, in either order (two different users).
        init(_ a: String, _ b: String) {
            precondition(a != b, "a conversation is between two users, not \(a) and itself")
            if a.utf8.lexicographicallyPrecedes(b.utf8) {
                low = a
                high = b
            } else {
                low = b
                high = a
            }
        }

        /// Its name in keys and entries: `low \0 high`.
        func append(to bytes: inout [UInt8]) {
            bytes.append(contentsOf: low.utf8)
            bytes.append(0)
            bytes.append(contentsOf: high.utf8)
        }

        /// The other user of the conversation.
        func peer(of user: String) -> String { user == low ? high : low }
    }

    /// What a value could not be read as.
    enum DecodingError: Error, Equatable {
        /// The `record` value ended inside a field; `bytes` is its length.
        case truncated(record: String, bytes: Int)
        /// The `record` value has `bytes` bytes after its last field.
        case leftover(record: String, bytes: Int)
        /// An entry's conversation is not two names joined by a 0 byte.
        case conversation([UInt8])
        /// A key too short to end with a number.
        case key([UInt8])
    }

    // MARK: Keys

    /// `m` conversation `\0`: the prefix of a conversation's messages.
    static func messagePrefix(_ conversation: Conversation) -> [UInt8] {
        var key = [UInt8]()
        appendMessagePrefix(conversation, to: &key)
        return key
    }

    static func appendMessagePrefix(_ conversation: Conversation, to key: inout [UInt8]) {
        key.append(messageTag)
        conversation.append(to: &key)
        key.append(0)
    }

    /// `m` conversation `\0` sequence.
    static func messageKey(_ conversation: Conversation, sequence: UInt64) -> [UInt8] {
        var key = messagePrefix(conversation)
        key.appendBigEndian(sequence)
        return key
    }

    /// `e` stream `\0`: the prefix of a stream's entries.
    static func entryPrefix(stream: String) -> [UInt8] {
        var key = [UInt8]()
        appendEntryPrefix(stream: stream, to: &key)
        return key
    }

    static func appendEntryPrefix(stream: String, to key: inout [UInt8]) {
        key.append(entryTag)
        key.append(contentsOf: stream.utf8)
        key.append(0)
    }

    /// `e` stream `\0` offset.
    static func entryKey(stream: String, offset: UInt64) -> [UInt8] {
        var key = entryPrefix(stream: stream)
        key.appendBigEndian(offset)
        return key
    }

    /// `c` user `\0` peer.
    static func summaryKey(user: String, peer: String) -> [UInt8] {
        var key = [UInt8]()
        appendSummaryKey(user: user, peer: peer, to: &key)
        return key
    }

    static func appendSummaryKey(user: String, peer: String, to key: inout [UInt8]) {
        key.append(summaryTag)
        key.append(contentsOf: user.utf8)
        key.append(0)
        key.append(contentsOf: peer.utf8)
    }

    /// The first key after every key that starts with `prefix` (a prefix ending in a 0 byte,
    /// as all of these do: that byte becomes 1), for an iterator's upper bound.
    static func end(ofPrefix prefix: [UInt8]) -> [UInt8] {
        var end = prefix
        while let last = end.last {
            if last < 0xFF {
                end[end.count - 1] = last + 1
                return end
            }
            end.removeLast()
        }
        preconditionFailure("no key follows every key with the prefix \(prefix)")
    }

    /// The sequence or offset a message or entry key ends with.
    static func number(endingKey key: [UInt8]) throws(DecodingError) -> UInt64 {
        guard key.count > 8 else { throw .key(key) }
        return bigEndian(key[(key.count - 8)...])
    }

    /// The number `bytes` hold, most significant first.
    private static func bigEndian(_ bytes: ArraySlice<UInt8>) -> UInt64 {
        var number: UInt64 = 0
        for byte in bytes { number = number << 8 | UInt64(byte) }
        return number
    }

    // MARK: Values

    /// A message: who sent it, its id and fingerprint (the client's, for deduplication), the
    /// server's time (Unix ms) and the body, the rest of the value.
    struct Message: Equatable, Sendable {
        var sender: String
        var messageID: String
        var fingerprint: UInt64
        var serverTime: UInt64
        var body: [UInt8]

        func encode(into value: inout [UInt8]) {
            value.appendName(sender)
            value.appendName(messageID)
            value.appendBigEndian(fingerprint)
            value.appendBigEndian(serverTime)
            value.append(contentsOf: body)
        }

        init(sender: String, messageID: String, fingerprint: UInt64, serverTime: UInt64, body: [UInt8]) {
            self.sender = sender
            self.messageID = messageID
            self.fingerprint = fingerprint
            self.serverTime = serverTime
            self.body = body
        }

        init(decoding value: [UInt8]) throws(DecodingError) {
            var reader = ValueReader(value, record: "message")
            sender = try reader.name()
            messageID = try reader.name()
            fingerprint = try reader.number()
            serverTime = try reader.number()
            body = reader.rest()
        }
    }

    /// A stream entry: the message it points to (conversation and sequence) and, in the
    /// sender's own stream, the device it came from (empty in the recipient's).
    struct Entry: Equatable, Sendable {
        var conversation: Conversation
        var sequence: UInt64
        var origin: String

        func encode(into value: inout [UInt8]) {
            let start = value.count
            value.append(0)
            conversation.append(to: &value)
            let length = value.count - start - 1
            precondition(length <= 255, "a conversation name of \(length) bytes, over 255")
            value[start] = UInt8(length)
            value.appendBigEndian(sequence)
            value.appendName(origin)
        }

        init(conversation: Conversation, sequence: UInt64, origin: String) {
            self.conversation = conversation
            self.sequence = sequence
            self.origin = origin
        }

        init(decoding value: [UInt8]) throws(DecodingError) {
            var reader = ValueReader(value, record: "entry")
            let name = Array(try reader.bytes(Int(try reader.byte())))
            guard let zero = name.firstIndex(of: 0), zero > 0, zero < name.count - 1, !name[(zero + 1)...].contains(0) else {
                throw .conversation(name)
            }
            conversation = Conversation(String(decoding: name[..<zero], as: UTF8.self), String(decoding: name[(zero + 1)...], as: UTF8.self))
            sequence = try reader.number()
            origin = try reader.name()
            try reader.finish()
        }
    }

    /// One side's summary of a conversation: its newest message (the offset in this user's
    /// stream, the conversation's sequence, the server time) and how many this user has not
    /// read (messages from the peer since this user last sent one).
    struct Summary: Equatable, Sendable {
        var lastOffset: UInt64
        var lastSequence: UInt64
        var serverTime: UInt64
        var unread: UInt32

        func encode(into value: inout [UInt8]) {
            value.appendBigEndian(lastOffset)
            value.appendBigEndian(lastSequence)
            value.appendBigEndian(serverTime)
            value.appendBigEndian(UInt64(unread), bytes: 4)
        }

        init(lastOffset: UInt64, lastSequence: UInt64, serverTime: UInt64, unread: UInt32) {
            self.lastOffset = lastOffset
            self.lastSequence = lastSequence
            self.serverTime = serverTime
            self.unread = unread
        }

        init(decoding value: [UInt8]) throws(DecodingError) {
            var reader = ValueReader(value, record: "summary")
            lastOffset = try reader.number()
            lastSequence = try reader.number()
            serverTime = try reader.number()
            unread = UInt32(try reader.number(bytes: 4))
            try reader.finish()
        }
    }

    /// Reads a value's fields in order; every read checks the length left.
    private struct ValueReader {
        let value: [UInt8]
        let record: String
        var position = 0

        init(_ value: [UInt8], record: String) {
            self.value = value
            self.record = record
        }

        mutating func bytes(_ count: Int) throws(DecodingError) -> ArraySlice<UInt8> {
            guard value.count - position >= count else { throw .truncated(record: record, bytes: value.count) }
            defer { position += count }
            return value[position..<(position + count)]
        }

        mutating func byte() throws(DecodingError) -> UInt8 { try bytes(1).first! }

        mutating func number(bytes count: Int = 8) throws(DecodingError) -> UInt64 {
            bigEndian(try bytes(count))
        }

        mutating func name() throws(DecodingError) -> String {
            String(decoding: try bytes(Int(try byte())), as: UTF8.self)
        }

        mutating func rest() -> [UInt8] {
            defer { position = value.count }
            return Array(value[position...])
        }

        func finish() throws(DecodingError) {
            guard position == value.count else { throw .leftover(record: record, bytes: value.count - position) }
        }
    }
}
