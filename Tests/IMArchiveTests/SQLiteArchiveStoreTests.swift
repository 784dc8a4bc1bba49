import Foundation
import GRDB
@testable import IMArchive
import IMTestSupport
import Testing

/// A fresh directory for one test's SQLite files, removed by `remove()`.
struct Scratch {
    let directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-archive-\(UInt64.random(in: 0...UInt64.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    var path: String { directory.appendingPathComponent("archive.sqlite").path }

    func remove() { try? FileManager.default.removeItem(at: directory) }
}

/// A chat from `sender` with `id` to `to` (and the sender's own copy, from `device`).
func chat(_ sender: String, _ id: String, to: [String], device: String? = "phone", text: String = "hi", at time: UInt64 = 1_000) -> ArchiveMessage {
    var copies = to.map { ArchiveMessage.Copy(stream: $0) }
    if let device { copies.append(.init(stream: sender, origin: device)) }
    return ArchiveMessage(
        sender: sender, messageID: id, fingerprint: UInt64(truncatingIfNeeded: (to.joined() + text).hashValue),
        serverTime: time, body: Array("{\"text\":\"\(text)\"}".utf8), copies: copies)
}

@Suite("SQLite archive store")
struct SQLiteArchiveStoreTests {
    @Test("offsets count 1, 2, 3 per stream across commits, the sender's copy in its own stream")
    func offsets() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let store = try SQLiteArchiveStore.open(path: scratch.path)
        let first = try await store.commit([chat("alice", "m-1", to: ["bob"]), chat("carol", "m-1", to: ["bob"], device: nil)], positions: [])
        #expect(first == [.stored([1, 1]), .stored([2])])
        let second = try await store.commit([chat("alice", "m-2", to: ["bob", "dave"])], positions: [])
        #expect(second == [.stored([3, 1, 2])])
        let bob = try await store.read(stream: "bob", after: 0, through: .max, limit: 10)
        #expect(bob.map(\.offset) == [1, 2, 3])
        #expect(bob.map(\.sender) == ["alice", "carol", "alice"])
        #expect(bob.allSatisfy { $0.origin == nil })
        let alice = try await store.read(stream: "alice", after: 0, through: .max, limit: 10)
        #expect(alice.map(\.offset) == [1, 2])
        #expect(alice.map(\.origin) == ["phone", "phone"])
        #expect(alice.first?.body == Array("{\"text\":\"hi\"}".utf8))
        #expect(try await store.read(stream: "bob", after: 1, through: 2, limit: 10).map(\.offset) == [2])
        #expect(try await store.read(stream: "bob", after: 0, through: .max, limit: 2).map(\.offset) == [1, 2])
        #expect(try await store.bounds(of: "bob") == StreamBounds(last: 3, first: 1))
        #expect(try await store.bounds(of: "nobody") == .empty)
        await store.close()
    }

    @Test("a message stored again is a duplicate with its first copies, another with the same id is reused")
    func duplicates() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let store = try SQLiteArchiveStore.open(path: scratch.path)
        let message = chat("alice", "m-1", to: ["bob"], at: 77)
        _ = try await store.commit([message], positions: [])
        var later = message
        later.serverTime = 99
        // Within one batch too: the second of two equal messages is a duplicate of the first.
        let outcomes = try await store.commit([later, chat("alice", "m-1", to: ["bob"], text: "other"), chat("alice", "m-2", to: ["bob"]),
                                               chat("alice", "m-2", to: ["bob"])], positions: [])
        guard case .duplicate(let first, 77) = outcomes[0] else {
            Issue.record("expected a duplicate with the first server time, got \(outcomes[0])")
            return
        }
        #expect(Set(first) == [StoredCopy(stream: "bob", offset: 1), StoredCopy(stream: "alice", offset: 1, origin: "phone")])
        #expect(outcomes[1] == .reused)
        #expect(outcomes[2] == .stored([2, 2]))
        guard case .duplicate(let copies, 1_000) = outcomes[3] else {
            Issue.record("expected a duplicate, got \(outcomes[3])")
            return
        }
        #expect(Set(copies) == [StoredCopy(stream: "bob", offset: 2), StoredCopy(stream: "alice", offset: 2, origin: "phone")])
        #expect(outcomes[0].offset(in: "bob", of: message) == 1)
        #expect(try await store.bounds(of: "bob").last == 2, "nothing was added for the duplicate and the reuse")
        await store.close()
    }

    @Test("positions: saved with a commit, never moved back")
    func positions() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let store = try SQLiteArchiveStore.open(path: scratch.path)
        #expect(try await store.position(user: "bob", device: "phone") == nil)
        _ = try await store.commit([], positions: [DevicePosition(user: "bob", device: "phone", offset: 5)])
        _ = try await store.commit([], positions: [DevicePosition(user: "bob", device: "phone", offset: 3),
                                                   DevicePosition(user: "bob", device: "tablet", offset: 1)])
        #expect(try await store.position(user: "bob", device: "phone") == 5)
        #expect(try await store.position(user: "bob", device: "tablet") == 1)
        await store.close()
    }

    @Test("group memberships: unknown until recorded, added and removed (a group whose members all left is known and empty); a file of the first schema gets the table")
    func groupMembers() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        // A file as the first schema made it (GRDB's migrations table says v1).
        let queue = try DatabaseQueue(path: scratch.path)
        try await queue.write { db in
            try db.execute(sql: "CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
            try db.execute(sql: "INSERT INTO grdb_migrations VALUES ('v1')")
            for statement in SQLiteArchiveStore.schema { try db.execute(sql: statement) }
            try db.execute(sql: "INSERT INTO meta(key, value) VALUES ('kind', 'imgw-archive'), ('epoch', '77')")
        }
        try queue.close()
        let store = try SQLiteArchiveStore.open(path: scratch.path)
        #expect(store.epoch.rawValue == 77)
        #expect(try await store.groupMembers("team") == nil)
        try await store.recordGroupMembers("team", ["alice": 10, "bob": 11])
        try await store.recordGroupMembers("team", ["carol": 12, "bob": nil])
        #expect(try await store.groupMembers("team") == ["alice": 10, "carol": 12])
        try await store.recordGroupMembers("team", ["alice": nil, "carol": nil])
        #expect(try await store.groupMembers("team") == [:])
        #expect(try await store.groupMembers("other") == nil)
        await store.close()
    }

    @Test("history pages in order with `complete`, a group member's history from its join, the conversation list with unread counts, read markers")
    func history() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let store = try SQLiteArchiveStore.open(path: scratch.path)
        try await ArchiveHistoryScenario.run(store)
        await store.close()
    }

    @Test("the cap per conversation deletes the oldest entries of one stream's conversation, the messages no stream holds, and marks the stream trimmed")
    func trim() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let store = try SQLiteArchiveStore.open(path: scratch.path)
        try await ArchiveHistoryScenario.trim(store)
        await store.close()
    }

    @Test("a file of the second schema gets each entry's conversation and the conversation lists from the stored bodies")
    func historyMigration() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let queue = try DatabaseQueue(path: scratch.path)
        let bodies = [
            (1, "alice", "a-1", #"{"from":"alice","id":"a-1","text":"x","to":"bob","type":"text"}"#),
            (2, "bob", "b-1", #"{"from":"bob","id":"b-1","text":"x","to":"alice","type":"text"}"#),
            (3, "alice", "a-2", #"{"from":"alice","id":"a-2","text":"x","to":"bob","type":"text"}"#),
            (4, "carol", "g-1", #"{"from":"carol","group":"team","id":"g-1","text":"x","to":"team","type":"text"}"#),
            (5, "carol", "junk", "not json"),
        ]
        try await queue.write { db in
            try db.execute(sql: "CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
            try db.execute(sql: "INSERT INTO grdb_migrations VALUES ('v1'), ('v2-groups')")
            for statement in SQLiteArchiveStore.schema + SQLiteArchiveStore.groupSchema { try db.execute(sql: statement) }
            try db.execute(sql: "INSERT INTO meta(key, value) VALUES ('kind', 'imgw-archive'), ('epoch', '78')")
            for (id, sender, messageID, body) in bodies {
                try db.execute(
                    sql: "INSERT INTO message VALUES (?, ?, ?, 0, ?, ?)", arguments: [id, sender, messageID, 1_000 + id, Data(body.utf8)])
            }
            // bob: a-1 (1), his own b-1 (2), a-2 (3), g-1 (4), junk (5); alice: a-1 (1), b-1 (2), a-2 (3).
            for (stream, offset, message, origin) in [
                ("bob", 1, 1, nil), ("bob", 2, 2, "phone"), ("bob", 3, 3, nil), ("bob", 4, 4, nil), ("bob", 5, 5, nil),
                ("alice", 1, 1, "phone"), ("alice", 2, 2, nil), ("alice", 3, 3, "phone"),
            ] as [(String, Int, Int, String?)] {
                try db.execute(sql: "INSERT INTO entry VALUES (?, ?, ?, ?)", arguments: [stream, offset, message, origin])
            }
            try db.execute(sql: "INSERT INTO stream VALUES ('bob', 5), ('alice', 3)")
        }
        try queue.close()
        let store = try SQLiteArchiveStore.open(path: scratch.path)
        let bob = try await store.conversations(user: "bob", before: nil, limit: 10)
        #expect(bob.conversations.map(\.conversation) == [.group("team"), .user("alice")])
        #expect(bob.conversations.map(\.unread) == [1, 1] && bob.conversations.map(\.readThrough) == [0, 2])
        #expect(bob.conversations.map(\.lastTime) == [1_004, 1_003] && bob.conversations.last?.last?.messageID == "a-2")
        #expect(try await store.history(stream: "bob", conversation: .user("alice"), position: .latest, limit: 10).entries.map(\.messageID)
                == ["a-1", "b-1", "a-2"])
        let alice = try await store.conversations(user: "alice", before: nil, limit: 10)
        #expect(alice.conversations.map(\.conversation) == [.user("bob")] && alice.conversations.first?.readThrough == 3)
        #expect(alice.conversations.first?.unread == 0)
        await store.close()
    }

    @Test("an archive of the fourth schema written by imgw (Fixtures/make-v4-archive.sh) opens with its epoch, offsets, lists, markers, deletions, trims and erasures as they were")
    func fourthSchemaMigration() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let fixture = try #require(Bundle.module.url(forResource: "archive-v4", withExtension: "sqlite", subdirectory: "Fixtures"))
        try FileManager.default.copyItem(atPath: fixture.path, toPath: scratch.path)
        let store = try SQLiteArchiveStore.open(path: scratch.path)
        #expect(store.epoch.rawValue == 3_140_882_096_163_785)
        let applied = try await DatabaseQueue(path: scratch.path).read { db in try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations") }
        #expect(applied.last == "v5-lean")

        // Streams: capped through 4 (a-1, a-2, a-3, b-1), the tombstone of a-2 at 7; dave erased.
        #expect(try await store.bounds(of: "bob") == StreamBounds(last: 10, first: 5, trimmedThrough: 4))
        #expect(try await store.bounds(of: "alice") == StreamBounds(last: 10, first: 5, trimmedThrough: 4))
        #expect(try await store.bounds(of: "dave") == StreamBounds(last: 1, first: 2))
        #expect(try await store.position(user: "bob", device: "cli") == 8)
        #expect(try await store.read(stream: "bob", after: 4, through: .max, limit: 10).map(\.messageID) == ["g-1", "a-4", "a-2", "api-1", "a-5", "a-6"])

        // bob's list: alice (read through 8 by a marker, a-5 and a-6 unread), the team (g-1 unread).
        let bob = try await store.conversations(user: "bob", before: nil, limit: 10)
        #expect(bob.conversations.map(\.conversation) == [.user("alice"), .group("team")] && bob.complete)
        #expect(bob.conversations.map(\.lastOffset) == [10, 5] && bob.conversations.map { $0.last?.messageID } == ["a-6", "g-1"])
        #expect(bob.conversations.map(\.readThrough) == [8, 0] && bob.conversations.map(\.unread) == [2, 1])
        #expect(bob.conversations.first?.lastTime == bob.conversations.first?.last?.serverTime && (bob.conversations.first?.lastTime ?? 0) > 0)
        // alice's: she sent the newest from a device (read through it), the API's copy counts as hers.
        let alice = try await store.conversations(user: "alice", before: nil, limit: 10)
        #expect(alice.conversations.map(\.conversation) == [.user("bob"), .group("team")])
        #expect(alice.conversations.map(\.readThrough) == [10, 0] && alice.conversations.map(\.unread) == [0, 1])
        // erin's line: dave's message, its body erased.
        let erin = try await store.conversations(user: "erin", before: nil, limit: 10)
        #expect(erin.conversations.map(\.conversation) == [.user("dave")] && erin.conversations.first?.unread == 1)
        #expect(erin.conversations.first?.last.map { String(decoding: $0.body, as: UTF8.self).contains("deleted") } == true)
        #expect(try await store.conversations(user: "dave", before: nil, limit: 10).conversations.isEmpty)

        // History: what the cap left, the tombstone entry not a line of its own.
        let history = try await store.history(stream: "bob", conversation: .user("alice"), position: .latest, limit: 10)
        #expect(history.entries.map(\.messageID) == ["a-4", "api-1", "a-5", "a-6"] && history.complete)

        // Markers move as before; a new message and a deletion take the next offsets.
        #expect(try await store.markRead(user: "bob", conversation: .user("alice"), through: 11) == .pastEnd(last: 10))
        #expect(try await store.markRead(user: "bob", conversation: .user("alice"), through: 9)
                == .marked(ReadMarker(conversation: .user("alice"), readThrough: 9, unread: 1)))
        #expect(try await store.commit([ArchiveHistoryScenario.direct("alice", "a-7", to: "bob", device: "cli-send", at: 9_000)], positions: [])
                == [.stored([11, 11])])
        #expect(try await store.commit([ArchiveHistoryScenario.direct("bob", "b-2", to: "dave", at: 9_001)], positions: []) == [.stored([2, 12])])
        let deleted = try #require(try await store.deleteMessage(sender: "alice", messageID: "a-5", at: 5, origin: "cli-send") { _ in Array(#"{"deleted":5}"#.utf8) })
        #expect(Set(deleted.tombstones) == [StoredCopy(stream: "alice", offset: 12, origin: "cli-send"), StoredCopy(stream: "bob", offset: 13)])
        let after = try await store.conversations(user: "bob", before: nil, limit: 10)
        #expect(after.conversations.map(\.conversation) == [.user("dave"), .user("alice"), .group("team")])
        #expect(after.conversations.map(\.lastOffset) == [12, 11, 5] && after.conversations.map(\.unread) == [0, 2, 1])
        await store.close()
    }

    @Test("a commit after a deletion's tombstones gives the offsets after them (what the writer remembers is forgotten by other writes)")
    func offsetsAfterTombstones() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let store = try SQLiteArchiveStore.open(path: scratch.path)
        #expect(try await store.commit([chat("alice", "m-1", to: ["bob"])], positions: []) == [.stored([1, 1])])
        let deleted = try await store.deleteMessage(sender: "alice", messageID: "m-1", at: 2_000, origin: "phone") { _ in Array("{}".utf8) }
        #expect(deleted?.tombstones.map(\.offset) == [2, 2])
        #expect(try await store.commit([chat("bob", "m-1", to: ["alice"])], positions: []) == [.stored([3, 3])])
        #expect(try await store.bounds(of: "alice").last == 3)
        await store.close()
    }

    @Test("the epoch is kept across reopening; a new file has another one")
    func epoch() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let store = try SQLiteArchiveStore.open(path: scratch.path)
        _ = try await store.commit([chat("alice", "m-1", to: ["bob"])], positions: [])
        let epoch = store.epoch
        await store.close()
        let again = try SQLiteArchiveStore.open(path: scratch.path, synchronous: .full)
        #expect(again.epoch == epoch)
        #expect(try await again.commit([chat("alice", "m-2", to: ["bob"])], positions: []) == [.stored([2, 2])], "offsets go on")
        await again.close()
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: scratch.path + suffix) }
        let fresh = try SQLiteArchiveStore.open(path: scratch.path)
        #expect(fresh.epoch != epoch)
        #expect(try await fresh.bounds(of: "bob") == .empty)
        await fresh.close()
    }

    @Test("retention deletes the oldest messages in batches; offsets are never given out again")
    func retention() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let store = try SQLiteArchiveStore.open(path: scratch.path)
        let messages = (1...10).map { chat("alice", "m-\($0)", to: ["bob"], at: UInt64($0) * 100) }
        _ = try await store.commit(messages, positions: [])
        #expect(try await store.deleteMessages(acceptedBefore: 750, limit: 4) == 4)
        #expect(try await store.bounds(of: "bob") == StreamBounds(last: 10, first: 5))
        #expect(try await store.deleteMessages(acceptedBefore: 750, limit: 4) == 3)
        #expect(try await store.deleteMessages(acceptedBefore: 750, limit: 4) == 0)
        #expect(try await store.read(stream: "bob", after: 0, through: .max, limit: 100).map(\.offset) == [8, 9, 10])
        #expect(try await store.deleteMessages(acceptedBefore: .max, limit: 100) == 3)
        #expect(try await store.bounds(of: "bob") == StreamBounds(last: 10, first: 11))
        #expect(try await store.commit([chat("alice", "m-11", to: ["bob"])], positions: []) == [.stored([11, 11])])
        let size = try await store.size()
        #expect(size.messages == 1 && size.entries == 2 && size.bytes > 0)
        await store.close()
    }

    @Test("a file that is not an imgw archive is refused, and says so")
    func notAnArchive() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        try Data("this is not a database, it is a text file of some length ...".utf8).write(to: URL(fileURLWithPath: scratch.path))
        #expect { try SQLiteArchiveStore.open(path: scratch.path) } throws: { error in
            guard let error = error as? ArchiveError else { return false }
            return error.code == .corrupt || error.code == .misconfigured
        }
        try FileManager.default.removeItem(atPath: scratch.path)
        let other = try DatabaseQueue(path: scratch.path)
        try await other.write { db in try db.execute(sql: "CREATE TABLE customers (id INTEGER PRIMARY KEY)") }
        try other.close()
        #expect { try SQLiteArchiveStore.open(path: scratch.path) } throws: { error in
            (error as? ArchiveError)?.code == .corrupt && "\(error)".contains("customers")
        }
    }

    @Test("a directory that cannot be created is a clear error")
    func badPath() {
        #expect { try SQLiteArchiveStore.open(path: "/proc/imgw-no/archive.sqlite") } throws: { error in
            (error as? ArchiveError)?.code == .misconfigured && "\(error)".contains("/proc/imgw-no")
        }
    }
}
