/// The archive's lean records (``LeanRecord``) in a ``RocksDBStore``, written as the archive's
/// single writer would: each one-to-one message as five puts (the message, an entry in each
/// user's stream, each side's conversation summary) gathered into a write batch, the batch
/// written by ``commit()``. Being the only writer, it keeps the counters in memory: each
/// conversation's last sequence, each stream's last offset, each side's unread count.
///
/// Reads: a stream from an offset (a device catching up) and a conversation's newest messages
/// (a history page). Used from one task, like its store.
final class RocksDBArchive {
    /// One one-to-one message to store.
    struct Chat: Sendable, Equatable {
        var sender: String
        var recipient: String
        /// The sending device, kept in the sender's stream entry.
        var origin: String
        var messageID: String
        var fingerprint: UInt64
        var serverTime: UInt64
        var body: [UInt8]
    }

    /// An entry read from a stream.
    struct StreamEntry: Equatable, Sendable {
        let offset: UInt64
        let entry: LeanRecord.Entry
    }

    /// A message read from a conversation.
    struct HistoryItem: Equatable, Sendable {
        let sequence: UInt64
        let message: LeanRecord.Message
    }

    let store: RocksDBStore
    private let batch = RocksDBWriteBatch()
    /// Messages in the batch not yet written.
    private(set) var pendingMessages = 0
    private var conversations: [LeanRecord.Conversation: ConversationState] = [:]
    private var offsets: [String: UInt64] = [:]
    // Buffers reused for every record (the batch copies them).
    private var key: [UInt8] = []
    private var value: [UInt8] = []

    /// A conversation's counters: its last sequence and each side's unread count.
    private struct ConversationState {
        var sequence: UInt64 = 0
        var unreadLow: UInt32 = 0
        var unreadHigh: UInt32 = 0
    }

    /// An archive writing into `store`, which it must be the only one to write (its counters
    /// start at zero: an empty store).
    init(store: RocksDBStore) {
        self.store = store
        key.reserveCapacity(64)
        value.reserveCapacity(256)
    }

    /// Adds `chat`'s five records to the batch; ``commit()`` writes them.
    func append(_ chat: Chat) {
        let conversation = LeanRecord.Conversation(chat.sender, chat.recipient)
        let senderIsLow = conversation.low == chat.sender
        var state = conversations[conversation, default: ConversationState()]
        state.sequence += 1
        // The recipient has one more unread; the sender has read the conversation.
        if senderIsLow {
            state.unreadHigh += 1
            state.unreadLow = 0
        } else {
            state.unreadLow += 1
            state.unreadHigh = 0
        }
        conversations[conversation] = state
        let sequence = state.sequence
        let recipientUnread = senderIsLow ? state.unreadHigh : state.unreadLow
        let senderOffset = nextOffset(chat.sender)
        let recipientOffset = nextOffset(chat.recipient)

        key.removeAll(keepingCapacity: true)
        LeanRecord.appendMessagePrefix(conversation, to: &key)
        key.appendBigEndian(sequence)
        value.removeAll(keepingCapacity: true)
        LeanRecord.Message(sender: chat.sender, messageID: chat.messageID, fingerprint: chat.fingerprint, serverTime: chat.serverTime, body: chat.body)
            .encode(into: &value)
        batch.put(key, value)

        putEntry(stream: chat.sender, offset: senderOffset, LeanRecord.Entry(conversation: conversation, sequence: sequence, origin: chat.origin))
        putEntry(stream: chat.recipient, offset: recipientOffset, LeanRecord.Entry(conversation: conversation, sequence: sequence, origin: ""))
        putSummary(
            user: chat.sender, peer: chat.recipient,
            LeanRecord.Summary(lastOffset: senderOffset, lastSequence: sequence, serverTime: chat.serverTime, unread: 0))
        putSummary(
            user: chat.recipient, peer: chat.sender,
            LeanRecord.Summary(lastOffset: recipientOffset, lastSequence: sequence, serverTime: chat.serverTime, unread: recipientUnread))
        pendingMessages += 1
    }

    /// Writes the batch (one WAL record) and empties it. When it throws, the counters are
    /// ahead of the store: the writer is done.
    func commit() throws(RocksDBError) {
        guard pendingMessages > 0 else { return }
        try store.write(batch)
        batch.clear()
        pendingMessages = 0
    }

    /// The last offset written to `stream` (0: none), from memory.
    func lastOffset(stream: String) -> UInt64 { offsets[stream] ?? 0 }

    /// The last sequence written to the conversation of `a` and `b` (0: none), from memory.
    func lastSequence(_ a: String, _ b: String) -> UInt64 { conversations[LeanRecord.Conversation(a, b)]?.sequence ?? 0 }

    /// Up to `limit` entries of `stream` from `offset` on, in offset order (a seek, then steps).
    func read(stream: String, from offset: UInt64, limit: Int) throws -> [StreamEntry] {
        let prefix = LeanRecord.entryPrefix(stream: stream)
        let iterator = store.makeIterator(upperBound: LeanRecord.end(ofPrefix: prefix))
        var entries: [StreamEntry] = []
        entries.reserveCapacity(limit)
        iterator.seek(LeanRecord.entryKey(stream: stream, offset: offset))
        while entries.count < limit, iterator.isValid {
            entries.append(StreamEntry(offset: try LeanRecord.number(endingKey: iterator.key), entry: try LeanRecord.Entry(decoding: iterator.value)))
            iterator.next()
        }
        try iterator.checkStatus()
        return entries
    }

    /// The newest `limit` messages of the conversation of `a` and `b`, newest first (a seek
    /// for the last key of the conversation, then steps back).
    func history(_ a: String, _ b: String, limit: Int) throws -> [HistoryItem] {
        let prefix = LeanRecord.messagePrefix(LeanRecord.Conversation(a, b))
        let iterator = store.makeIterator(lowerBound: prefix, upperBound: LeanRecord.end(ofPrefix: prefix))
        var items: [HistoryItem] = []
        items.reserveCapacity(limit)
        iterator.seekForPrevious(prefix + [UInt8](repeating: 0xFF, count: 8))
        while items.count < limit, iterator.isValid {
            items.append(HistoryItem(sequence: try LeanRecord.number(endingKey: iterator.key), message: try LeanRecord.Message(decoding: iterator.value)))
            iterator.previous()
        }
        try iterator.checkStatus()
        return items
    }

    /// `user`'s summary of their conversation with `peer`, if they have one.
    func summary(user: String, peer: String) throws -> LeanRecord.Summary? {
        guard let value = try store.get(LeanRecord.summaryKey(user: user, peer: peer)) else { return nil }
        return try LeanRecord.Summary(decoding: value)
    }

    private func nextOffset(_ stream: String) -> UInt64 {
        let offset = (offsets[stream] ?? 0) + 1
        offsets[stream] = offset
        return offset
    }

    private func putEntry(stream: String, offset: UInt64, _ entry: LeanRecord.Entry) {
        key.removeAll(keepingCapacity: true)
        LeanRecord.appendEntryPrefix(stream: stream, to: &key)
        key.appendBigEndian(offset)
        value.removeAll(keepingCapacity: true)
        entry.encode(into: &value)
        batch.put(key, value)
    }

    private func putSummary(user: String, peer: String, _ summary: LeanRecord.Summary) {
        key.removeAll(keepingCapacity: true)
        LeanRecord.appendSummaryKey(user: user, peer: peer, to: &key)
        value.removeAll(keepingCapacity: true)
        summary.encode(into: &value)
        batch.put(key, value)
    }
}
