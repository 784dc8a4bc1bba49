import Foundation
import Testing

@testable import imbench

/// `imbench rocksdb`'s store and records on a real RocksDB: a small fill (2,000 messages between
/// 200 users, as `imbench history` chooses them), read back against a model of what was written.
@Suite("imbench rocksdb: the archive's lean records through RocksDB's C API")
struct RocksDBStoreTests {
    let plan = HistoryPlan(messages: 2_000, users: 200, heavy: 20, days: 60, now: 1_800_000_000_000)
    let body = [UInt8](repeating: UInt8(ascii: "x"), count: 64)

    /// What the fill must have written, worked out apart from the writer: each stream's entries
    /// in offset order, each conversation's messages in sequence order.
    struct Model {
        var streams: [String: [LeanRecord.Entry]] = [:]
        var conversations: [LeanRecord.Conversation: [LeanRecord.Message]] = [:]
        var last: [LeanRecord.Conversation: RocksDBArchive.Chat] = [:]

        mutating func add(_ chat: RocksDBArchive.Chat) {
            let conversation = LeanRecord.Conversation(chat.sender, chat.recipient)
            conversations[conversation, default: []].append(
                LeanRecord.Message(sender: chat.sender, messageID: chat.messageID, fingerprint: chat.fingerprint, serverTime: chat.serverTime, body: chat.body))
            let sequence = UInt64(conversations[conversation]!.count)
            streams[chat.sender, default: []].append(LeanRecord.Entry(conversation: conversation, sequence: sequence, origin: chat.origin))
            streams[chat.recipient, default: []].append(LeanRecord.Entry(conversation: conversation, sequence: sequence, origin: ""))
            last[conversation] = chat
        }
    }

    /// A new directory under the temporary one, removed after `body`.
    func withDirectory<Result>(_ body: (String) throws -> Result) throws -> Result {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rocksdb-test-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        return try body(directory.path)
    }

    /// The plan's messages written in batches of `batch`; the model of them.
    func fill(_ archive: RocksDBArchive, batch: Int = 128) throws -> Model {
        var model = Model()
        for index in 0..<plan.messages {
            let chat = plan.leanChat(index, body: body)
            archive.append(chat)
            model.add(chat)
            if archive.pendingMessages == batch { try archive.commit() }
        }
        try archive.commit()
        return model
    }

    /// Options small enough for a test.
    let options = RocksDBStore.Options(blockCacheMB: 8, writeBufferMB: 4, compression: .none)

    @Test("a catch-up scan reads a stream's entries in offset order with no gap, from any offset, each entry naming its message")
    func catchUp() throws {
        try withDirectory { path in
            let store = try RocksDBStore.open(path: path, options: options)
            defer { store.close() }
            let archive = RocksDBArchive(store: store)
            let model = try fill(archive)
            // A heavy user's stream (the longest), a normal user's, and one that shares a prefix
            // with others ("h1" and "h10", "h11", ...).
            for stream in [plan.name(0), plan.name(plan.normalUser(7)), "h1"] {
                let expected = try #require(model.streams[stream])
                #expect(archive.lastOffset(stream: stream) == UInt64(expected.count))
                let all = try archive.read(stream: stream, from: 1, limit: 100_000)
                let everyOffset: [UInt64] = Array(1...UInt64(expected.count))
                #expect(all.map(\.offset) == everyOffset, "\(stream): offsets in order, no gap")
                #expect(all.map(\.entry) == expected)
                let middle = UInt64(expected.count / 2 + 1)
                let page = try archive.read(stream: stream, from: middle, limit: 5)
                let pageEnd: UInt64 = min(middle + 5, UInt64(expected.count) + 1)
                let pageOffsets: [UInt64] = Array(middle..<pageEnd)
                #expect(page.map(\.offset) == pageOffsets)
                #expect(try archive.read(stream: stream, from: UInt64(expected.count) + 1, limit: 200).isEmpty)
                // Each entry points to a message of its conversation that has this stream's user in it.
                for item in all.prefix(20) {
                    let message = try #require(model.conversations[item.entry.conversation]?[Int(item.entry.sequence) - 1])
                    #expect([item.entry.conversation.low, item.entry.conversation.high].contains(stream))
                    #expect(item.entry.origin == (message.sender == stream ? "phone" : ""))
                }
            }
            #expect(try archive.read(stream: "nobody", from: 1, limit: 200).isEmpty)
        }
    }

    @Test("a history page is the conversation's newest messages, newest first, and a short conversation gives what it has")
    func historyPage() throws {
        try withDirectory { path in
            let store = try RocksDBStore.open(path: path, options: options)
            defer { store.close() }
            let archive = RocksDBArchive(store: store)
            let model = try fill(archive)
            let conversations = model.conversations.sorted { $0.value.count > $1.value.count }
            let longest = try #require(conversations.first)
            // Pages of 10: the fill's longest conversation (23 messages) is longer than a page.
            let pageSize = 10
            #expect(longest.value.count > pageSize, "the fill has a conversation longer than a page")
            let shortest = try #require(conversations.last)
            for (conversation, messages) in [longest, shortest] {
                // Asked from either side, in either order.
                for (a, b) in [(conversation.low, conversation.high), (conversation.high, conversation.low)] {
                    let page = try archive.history(a, b, limit: pageSize)
                    let count = min(pageSize, messages.count)
                    let newest = UInt64(messages.count)
                    let sequences: [UInt64] = (0..<count).map { (index: Int) -> UInt64 in newest - UInt64(index) }
                    let newestMessages: [LeanRecord.Message] = Array(messages.suffix(count).reversed())
                    #expect(page.map(\.sequence) == sequences)
                    #expect(page.map(\.message) == newestMessages)
                    #expect(archive.lastSequence(a, b) == UInt64(messages.count))
                }
            }
            #expect(try archive.history("h1", "nobody", limit: 50).isEmpty)
        }
    }

    @Test("each side's summary is overwritten by the conversation's last message; the recipient's counts it unread")
    func summaries() throws {
        try withDirectory { path in
            let store = try RocksDBStore.open(path: path, options: options)
            defer { store.close() }
            let archive = RocksDBArchive(store: store)
            let model = try fill(archive)
            for (conversation, chat) in model.last.prefix(50) {
                let messages = try #require(model.conversations[conversation])
                let sender = try #require(try archive.summary(user: chat.sender, peer: chat.recipient))
                let recipient = try #require(try archive.summary(user: chat.recipient, peer: chat.sender))
                let lastSequence = UInt64(messages.count)
                #expect(sender.lastSequence == lastSequence)
                #expect(recipient.lastSequence == lastSequence)
                #expect(sender.serverTime == chat.serverTime)
                #expect(recipient.serverTime == chat.serverTime)
                #expect(sender.unread == 0)
                // Unread: the messages from the sender since the recipient last wrote.
                let unread = UInt32(messages.reversed().prefix { (message: LeanRecord.Message) -> Bool in message.sender == chat.sender }.count)
                #expect(recipient.unread == unread)
                // The offsets of that message's entries in each user's stream.
                func offset(in stream: String) throws -> UInt64 {
                    let index = try #require(model.streams[stream]?.lastIndex { $0.conversation == conversation && $0.sequence == UInt64(messages.count) })
                    return UInt64(index + 1)
                }
                #expect(sender.lastOffset == (try offset(in: chat.sender)))
                #expect(recipient.lastOffset == (try offset(in: chat.recipient)))
            }
        }
    }

    @Test("reopened, the directory holds every record: the WAL kept what no flush wrote to an SST file")
    func reopen() throws {
        try withDirectory { path in
            let model: Model
            do {
                let store = try RocksDBStore.open(path: path, options: options)
                let archive = RocksDBArchive(store: store)
                model = try fill(archive)
                #expect(store.property("rocksdb.total-sst-files-size") == 0, "all of it in the memtable and the WAL")
                store.close()
            }
            let store = try RocksDBStore.open(path: path, options: options)
            defer { store.close() }
            let reader = RocksDBArchive(store: store)
            let stream = plan.name(0)
            #expect(try reader.read(stream: stream, from: 1, limit: 100_000).map(\.entry) == model.streams[stream])
            let (conversation, messages) = try #require(model.conversations.max { $0.value.count < $1.value.count })
            let newestMessages: [LeanRecord.Message] = Array(messages.suffix(50).reversed())
            #expect(try reader.history(conversation.low, conversation.high, limit: 50).map(\.message) == newestMessages)
            try store.flush()
            #expect((store.property("rocksdb.total-sst-files-size") ?? 0) > 0)
            #expect(store.writtenVersion() != nil)
        }
    }

    @Test("opening a path that is a regular file throws RocksDB's error with the path")
    func openFile() throws {
        try withDirectory { path in
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            let file = path + "/not-a-directory"
            try Data("x".utf8).write(to: URL(fileURLWithPath: file))
            let error = try #require(throws: RocksDBError.self) { try RocksDBStore.open(path: file, options: options) }
            guard case .open(let openedPath, let reason) = error else {
                Issue.record("not an open error: \(error)")
                return
            }
            #expect(openedPath == file)
            #expect(!reason.isEmpty)
            #expect(error.description.contains(file))
        }
    }

    @Test("the C API's compression constants: none is always there, LZ4 is in Debian's build")
    func compression() throws {
        #expect(try RocksDBStore.supports(.none))
        #expect(try RocksDBStore.supports(.lz4))
    }

    @Test("records decode as they were encoded; a value cut short or with bytes left over is refused")
    func records() throws {
        let conversation = LeanRecord.Conversation("h20", "h3")
        #expect(conversation.low == "h20" && conversation.high == "h3")
        let entry = LeanRecord.Entry(conversation: conversation, sequence: 7, origin: "phone")
        var value: [UInt8] = []
        entry.encode(into: &value)
        #expect(try LeanRecord.Entry(decoding: value) == entry)
        #expect(throws: LeanRecord.DecodingError.truncated(record: "entry", bytes: value.count - 1)) {
            try LeanRecord.Entry(decoding: Array(value.dropLast()))
        }
        #expect(throws: LeanRecord.DecodingError.leftover(record: "entry", bytes: 1)) { try LeanRecord.Entry(decoding: value + [0]) }
        let summary = LeanRecord.Summary(lastOffset: 1 << 40, lastSequence: 3, serverTime: 1_800_000_000_000, unread: 9)
        value = []
        summary.encode(into: &value)
        #expect(value.count == 28)
        #expect(try LeanRecord.Summary(decoding: value) == summary)
        let message = LeanRecord.Message(sender: "h1", messageID: HistoryPlan.uuidText(1, 2), fingerprint: 5, serverTime: 6, body: body)
        value = []
        message.encode(into: &value)
        #expect(try LeanRecord.Message(decoding: value) == message)
        // Keys sort by their numbers, and a stream's keys stay apart from a longer name's.
        #expect(LeanRecord.entryKey(stream: "h1", offset: 255).lexicographicallyPrecedes(LeanRecord.entryKey(stream: "h1", offset: 256)))
        #expect(LeanRecord.entryKey(stream: "h1", offset: .max).lexicographicallyPrecedes(LeanRecord.end(ofPrefix: LeanRecord.entryPrefix(stream: "h1"))))
        #expect(!LeanRecord.entryKey(stream: "h10", offset: 1).lexicographicallyPrecedes(LeanRecord.end(ofPrefix: LeanRecord.entryPrefix(stream: "h1"))))
        #expect(HistoryPlan.uuidText(0, 0) == "00000000-0000-4000-8000-000000000000")
        #expect(plan.leanChat(5, body: body) == plan.leanChat(5, body: body))
    }
}
