import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// The archive of one gateway: a SQLite file in WAL mode, through GRDB (a `DatabasePool`:
/// one writer and concurrent readers, so that catching a device up never waits for a
/// commit, and a commit never waits for a reader).
///
/// Tables (``schema``, then ``leanSchema``): `message` holds each body once; `entry` places a
/// message in a user's stream at an offset (one row per recipient, group member and the
/// sender's own copy), indexed by conversation (`entry_conversation`, which also answers the
/// conversation lists' newest messages and unread counts); `stream` how far deletions reached
/// in a stream (a stream's last offset is its newest entry's, or this when higher: retention
/// never lowers it); `position` each device's saved position; `conversation` each user's
/// conversations with their read markers; `trimmed` how far a cap per conversation deleted in
/// each stream; `group_member` group memberships; `meta` the epoch.
///
/// Durability (``Synchronous``): `normal` survives a kill -9 of any process (a commit is in
/// the WAL, in the kernel's page cache, before it returns); `full` also survives the loss of
/// power (fsync at each commit).
public final class SQLiteArchiveStore: ArchiveStore {
    /// `archive.sync`.
    public enum Synchronous: String, Sendable, Hashable, CaseIterable, Codable {
        /// `PRAGMA synchronous = NORMAL`: survives a crash of any process, not of the machine.
        case normal
        /// `PRAGMA synchronous = FULL`: an fsync at every commit; survives a power loss.
        case full
    }

    public let epoch: ArchiveEpoch
    /// The database file.
    public let path: String
    private let pool: DatabasePool
    private let checkpointer: WALCheckpointer
    /// What the writer knows of the file between its transactions (``WriterMemory``).
    private let memory = Mutex(WriterMemory())

    /// What the writer knows of the file without reading it, the file having no other writer
    /// (``isSoleWriter``): the next message id, and the last offset of each stream it wrote
    /// since it opened the file. Locked inside the writer's transactions only (GRDB runs them
    /// one at a time, so the lock is never waited for); a commit records what it gave out once
    /// COMMIT has returned, a failed one forgets everything, and every other write that gives
    /// out an offset forgets that stream.
    struct WriterMemory {
        var nextID: Int64?
        var heads: [String: Int64] = [:]

        /// Forgets everything (a transaction failed: what it gave out may not be in the file).
        mutating func forget() { self = WriterMemory() }
    }

    public var description: String { "sqlite \(path)" }

    /// One gateway writes a SQLite archive (its writer holds the file's lock while writing;
    /// another gateway on the same file is not a supported set-up).
    public var isSoleWriter: Bool { true }

    /// What `meta.kind` says in a file that is an imgw archive.
    static let kind = "imgw-archive"

    private init(pool: DatabasePool, checkpointer: WALCheckpointer, path: String, epoch: ArchiveEpoch) {
        self.pool = pool
        self.checkpointer = checkpointer
        self.path = path
        self.epoch = epoch
    }

    /// Opens (creating it, and its directory, if need be) the archive at `path`.
    ///
    /// Throws ``ArchiveError`` `misconfigured` when the file cannot be created or opened
    /// (a directory that cannot be made, no permission), `corrupt` when the file is not an
    /// imgw archive or was written by a newer imgw. `cacheKiB`: the writer's page cache
    /// (`PRAGMA cache_size`, `archive.cache_mb`; `nil`: SQLite's 2 MB); readers keep SQLite's.
    public static func open(path: String, synchronous: Synchronous = .normal, cacheKiB: Int? = nil) throws(ArchiveError) -> SQLiteArchiveStore {
        let directory = (path as NSString).deletingLastPathComponent
        if !directory.isEmpty {
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                throw ArchiveError(.misconfigured, "cannot create the archive's directory \(directory): \((error as NSError).localizedDescription)")
            }
        }
        var configuration = Configuration()
        configuration.label = "imgw-archive"
        // Every write goes through the one writer queue: a lock held by another process (a
        // backup with the sqlite3 shell) is waited for, not failed at once.
        configuration.busyMode = .timeout(5)
        configuration.maximumReaderCount = 4
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = \(synchronous == .full ? "FULL" : "NORMAL")")
            // The WAL is truncated back to this size when it starts over (it would otherwise
            // keep the size of its largest burst). Not less than a large commit's frames: a WAL
            // cut below what each commit writes is grown again by every one, and the file
            // system zeroes and allocates those blocks each time.
            try db.execute(sql: "PRAGMA journal_size_limit = \(WALCheckpointer.truncateFrames * 4096)")
            // Checkpoints are the checkpointer's (``WALCheckpointer``): SQLite's own would copy
            // the whole WAL inside the commit that crosses its threshold, holding that commit
            // and every chat waiting on it.
            try db.execute(sql: "PRAGMA wal_autocheckpoint = 0")
            // The writer's inserts land on pages all over a large file: the more of them it keeps,
            // the fewer it reads back. Readers keep SQLite's default (the kernel holds the file).
            if let cacheKiB, !db.configuration.readonly { try db.execute(sql: "PRAGMA cache_size = -\(cacheKiB)") }
        }
        let pool: DatabasePool
        do {
            pool = try DatabasePool(path: path, configuration: configuration)
        } catch {
            throw ArchiveError(.misconfigured, "cannot open the archive \(path): \(error)")
        }
        do {
            let epoch = try Self.migrate(pool)
            let checkpointer = try WALCheckpointer(path: path, configuration: configuration)
            return SQLiteArchiveStore(pool: pool, checkpointer: checkpointer, path: path, epoch: epoch)
        } catch let error as ArchiveError {
            throw error
        } catch let error as DatabaseError where error.resultCode == .SQLITE_NOTADB || error.resultCode == .SQLITE_CORRUPT {
            throw ArchiveError(.corrupt, "\(path) is not a SQLite database (\(error.resultCode)): move it away or set archive.path")
        } catch {
            throw ArchiveError(.misconfigured, "cannot prepare the archive \(path): \(error)")
        }
    }

    /// Creates the tables of a new file, checks an existing one; returns its epoch.
    private static func migrate(_ pool: DatabasePool) throws -> ArchiveEpoch {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            for statement in schema { try db.execute(sql: statement) }
            try db.execute(sql: "INSERT INTO meta(key, value) VALUES ('kind', ?), ('epoch', ?)",
                           arguments: [kind, String(ArchiveEpoch.random().rawValue)])
        }
        migrator.registerMigration("v2-groups") { db in
            for statement in groupSchema { try db.execute(sql: statement) }
        }
        migrator.registerMigration("v3-history") { db in
            for statement in historySchema { try db.execute(sql: statement) }
        }
        migrator.registerMigration("v4-trimmed") { db in
            // How far a cap per conversation has deleted in each stream (what a device whose
            // position is older may have lost).
            try db.execute(sql: "CREATE TABLE trimmed (stream TEXT PRIMARY KEY NOT NULL, through INTEGER NOT NULL) WITHOUT ROWID")
        }
        migrator.registerMigration("v5-lean") { db in
            for statement in leanSchema { try db.execute(sql: statement) }
        }
        let known = migrator.migrations
        try pool.read { db in
            let applied = try migrator.appliedIdentifiers(db)
            if let newer = applied.first(where: { !known.contains($0) }) {
                throw ArchiveError(.corrupt, "the archive was written by a newer imgw (schema \(newer)): use that version, or move the file away")
            }
            let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != 'grdb_migrations'")
            if applied.isEmpty && !tables.isEmpty {
                throw ArchiveError(.corrupt, "the file holds tables of something else (\(tables.prefix(3).joined(separator: ", "))): it is not an imgw archive")
            }
        }
        try migrator.migrate(pool)
        return try pool.read { db in
            guard try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'kind'") == kind,
                  let text = try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'epoch'"),
                  let number = UInt64(text), let epoch = ArchiveEpoch(rawValue: number)
            else { throw ArchiveError(.corrupt, "the archive's meta table is not imgw's: it is not an imgw archive") }
            return epoch
        }
    }

    /// The tables (docs/OPERATIONS.md, "The message archive").
    static let schema = [
        "CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID",
        // One row per message: its key (sender, message id), what it is (fingerprint), when,
        // and the body. The rowid grows with time: retention deletes from the smallest.
        """
        CREATE TABLE message (
          id INTEGER PRIMARY KEY, sender TEXT NOT NULL, message_id TEXT NOT NULL,
          fingerprint INTEGER NOT NULL, server_time INTEGER NOT NULL, body BLOB NOT NULL)
        """,
        "CREATE UNIQUE INDEX message_key ON message(sender, message_id)",
        // One row per copy: the message at an offset of a user's stream.
        """
        CREATE TABLE entry (
          stream TEXT NOT NULL, offset INTEGER NOT NULL, message INTEGER NOT NULL, origin TEXT,
          PRIMARY KEY (stream, offset)) WITHOUT ROWID
        """,
        "CREATE INDEX entry_message ON entry(message)",
        "CREATE TABLE stream (name TEXT PRIMARY KEY NOT NULL, last INTEGER NOT NULL) WITHOUT ROWID",
        """
        CREATE TABLE position (
          user TEXT NOT NULL, device TEXT NOT NULL, offset INTEGER NOT NULL, updated INTEGER NOT NULL,
          PRIMARY KEY (user, device)) WITHOUT ROWID
        """,
    ]

    /// The tables added by the second version: group memberships (`since` null: removed).
    static let groupSchema = [
        """
        CREATE TABLE group_member (
          grp TEXT NOT NULL, user TEXT NOT NULL, since INTEGER,
          PRIMARY KEY (grp, user)) WITHOUT ROWID
        """
    ]

    /// The third version: each entry's conversation (filled in for the entries stored before,
    /// from the bodies, which imgw writes as JSON with `from`, `to` and `group`), and each
    /// user's conversation list with its read marker and unread count.
    static let historySchema = [
        "ALTER TABLE entry ADD COLUMN conversation TEXT",
        // A tombstone: an entry of a message deleted for everyone, after the message's own
        // (which then reads as deleted too: the body is the tombstone's).
        "ALTER TABLE entry ADD COLUMN kind TEXT",
        // When the sender deleted it (its body is then a tombstone).
        "ALTER TABLE message ADD COLUMN deleted INTEGER",
        """
        UPDATE entry SET conversation = (
          SELECT CASE
            WHEN NOT json_valid(CAST(m.body AS TEXT)) THEN NULL
            WHEN json_extract(CAST(m.body AS TEXT), '$.group') IS NOT NULL THEN 'g:' || json_extract(CAST(m.body AS TEXT), '$.group')
            WHEN entry.stream = m.sender THEN 'u:' || json_extract(CAST(m.body AS TEXT), '$.to')
            ELSE 'u:' || m.sender END
          FROM message m WHERE m.id = entry.message)
        """,
        // History pages: a range of one conversation's offsets in one stream.
        "CREATE INDEX entry_conversation ON entry(stream, conversation, offset)",
        // A user's conversations: the newest message's offset and time, the read marker, and
        // the messages from others after it.
        """
        CREATE TABLE conversation (
          user TEXT NOT NULL, peer TEXT NOT NULL, last_offset INTEGER NOT NULL, last_time INTEGER NOT NULL,
          read_through INTEGER NOT NULL, unread INTEGER NOT NULL,
          PRIMARY KEY (user, peer)) WITHOUT ROWID
        """,
        // The list, most recent first.
        "CREATE INDEX conversation_recent ON conversation(user, last_offset)",
        """
        INSERT INTO conversation (user, peer, last_offset, last_time, read_through, unread)
        SELECT stream, conversation, max(offset), 0, coalesce(max(CASE WHEN origin IS NOT NULL THEN offset END), 0), 0
        FROM entry WHERE conversation IS NOT NULL GROUP BY stream, conversation
        """,
        """
        UPDATE conversation SET
          last_time = coalesce((SELECT m.server_time FROM entry e JOIN message m ON m.id = e.message
                                WHERE e.stream = conversation.user AND e.offset = conversation.last_offset), 0),
          unread = (SELECT count(*) FROM entry e WHERE e.stream = conversation.user AND e.conversation = conversation.peer
                    AND e.offset > conversation.read_through AND e.origin IS NULL)
        """,
    ]

    /// The fifth version: the write path's B-trees cut to those no key order can replace.
    /// A chat no longer updates a line of each user's conversation list nor each stream's
    /// counter: the list's newest message, its time and the unread count are read from
    /// `entry_conversation` (which now holds `origin` and `kind`, so that counting reads no
    /// row), `conversation` keeps only each line's read marker (written when a conversation
    /// starts and when a marker moves), and a stream's last offset is its newest entry's,
    /// `stream` keeping only what deletions removed (retention, the cap, erasure) so that no
    /// offset is given out twice. The rows and offsets stored before are kept as they are.
    static let leanSchema = [
        """
        CREATE TABLE conversation_marker (
          user TEXT NOT NULL, peer TEXT NOT NULL, read_through INTEGER NOT NULL,
          PRIMARY KEY (user, peer)) WITHOUT ROWID
        """,
        "INSERT INTO conversation_marker (user, peer, read_through) SELECT user, peer, read_through FROM conversation",
        // (conversation_recent goes with its table.)
        "DROP TABLE conversation",
        "ALTER TABLE conversation_marker RENAME TO conversation",
        "DROP INDEX entry_conversation",
        "CREATE INDEX entry_conversation ON entry(stream, conversation, offset, origin, kind)",
    ]

    public func commit(_ messages: [ArchiveMessage], positions: [DevicePosition]) async throws -> [AppendOutcome] {
        defer { checkpointer.committed() }
        return try await pool.writeWithoutTransaction { db in try self.transaction(messages, positions: positions, in: db) }
    }

    /// The same, on the calling thread (GRDB's writer queue runs it there when it is free).
    public var blockingCommit: (@Sendable (_ messages: [ArchiveMessage], _ positions: [DevicePosition]) throws -> [AppendOutcome])? {
        { messages, positions in
            defer { self.checkpointer.committed() }
            return try self.pool.writeWithoutTransaction { db in try self.transaction(messages, positions: positions, in: db) }
        }
    }

    /// Both commits' work on the writer's connection, with what the writer remembers.
    private func transaction(_ messages: [ArchiveMessage], positions: [DevicePosition], in db: Database) throws -> [AppendOutcome] {
        try memory.withLock { memory in try Self.transaction(messages, positions: positions, memory: &memory, in: db) }
    }

    /// ``commit(_:positions:memory:in:)`` in a transaction of its own (BEGIN IMMEDIATE ...
    /// COMMIT, prepared once; rolled back when anything fails, and `memory` forgotten).
    static func transaction(_ messages: [ArchiveMessage], positions: [DevicePosition], memory: inout WriterMemory, in db: Database) throws -> [AppendOutcome] {
        try step(db.cachedStatement(sql: "BEGIN IMMEDIATE"), in: db)
        do {
            let (outcomes, learned) = try commit(messages, positions: positions, memory: memory, in: db)
            try step(db.cachedStatement(sql: "COMMIT"), in: db)
            memory.nextID = learned.nextID
            for (stream, last) in learned.heads { memory.heads[stream] = last }
            return outcomes
        } catch {
            memory.forget()
            if sqlite3_get_autocommit(db.sqliteConnection) == 0 { try? db.execute(sql: "ROLLBACK") }
            throw error
        }
    }

    /// A write other than a commit of chats, in a transaction of its own; the checkpointer is
    /// told (``WALCheckpointer/committed()``).
    private func write<T: Sendable>(_ updates: @escaping @Sendable (Database) throws -> T) async throws -> T {
        defer { checkpointer.committed() }
        return try await pool.write(updates)
    }

    /// Forgets what the writer knows of `streams` (inside a write that gives out offsets in
    /// them without ``commit(_:positions:memory:in:)``).
    private func forgetHeads(of streams: some Sequence<String>) {
        memory.withLock { memory in for stream in streams { memory.heads[stream] = nil } }
    }

    /// Runs a statement without results through SQLite's API.
    static func step(_ statement: Statement, in db: Database) throws {
        let code = sqlite3_step(statement.sqliteStatement)
        sqlite3_reset(statement.sqliteStatement)
        guard code == SQLITE_DONE else {
            throw DatabaseError(
                resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)), sql: statement.sql)
        }
    }

    /// What the writer does after a commit: finishes a checkpoint the checkpointer has all but
    /// done, if it asked for that, so that the next commit starts the WAL over (writing over
    /// the WAL's first pages again, which the kernel holds, instead of growing the file).
    public var blockingBetweenCommits: (@Sendable () -> Void)? {
        let pool = self.pool
        let checkpointer = self.checkpointer
        return { checkpointer.finish(on: pool) }
    }

    /// The checkpointer's timer: whether it runs, and the checkpoints it ran.
    var checkpointTimer: (running: Bool, runs: Int) { (checkpointer.isRunning, checkpointer.runs.load(ordering: .relaxed)) }

    /// Checkpoints so far: those the writer finished (each let the WAL start over), those
    /// that held the writer to empty a WAL that had grown too long, and those of the background
    /// that found the writer's under way and left the copy to it.
    public var checkpoints: (finished: Int, truncated: Int, overlapped: Int) {
        (checkpointer.finished.load(ordering: .relaxed), checkpointer.truncated.load(ordering: .relaxed),
         checkpointer.overlapped.load(ordering: .relaxed))
    }

    /// Rows per multi-row statement: a batch takes a few statements, not a few per message.
    static let chunk = 64

    /// `prefix` followed by `count` copies of `row`, comma-separated: the SQL of a multi-row
    /// statement (``chunk`` of each kind at most, so each is prepared once and cached).
    static func rows(_ prefix: String, _ row: String, _ count: Int, _ suffix: String = "") -> String {
        prefix + Array(repeating: row, count: count).joined(separator: ",") + suffix
    }

    /// A value bound to a statement through SQLite's API.
    enum Value {
        case text(String)
        case integer(Int64)
        case blob([UInt8])
        case null
    }

    /// SQLite's "copy the value" destructor.
    static let transient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)

    /// Binds `values` to `statement` (prepared by GRDB, reset first) through SQLite's API:
    /// GRDB's arguments cost more than the inserts.
    static func bind(_ values: ArraySlice<Value>, to statement: Statement) {
        let handle = statement.sqliteStatement
        sqlite3_reset(handle)
        var index: Int32 = 1
        for value in values {
            switch value {
            case .text(let text): sqlite3_bind_text(handle, index, text, -1, transient)
            case .integer(let number): sqlite3_bind_int64(handle, index, number)
            case .blob(let bytes): bytes.withUnsafeBytes { sqlite3_bind_blob(handle, index, $0.baseAddress, Int32($0.count), transient) }
            case .null: sqlite3_bind_null(handle, index)
            }
            index += 1
        }
    }

    /// Runs `sql(n)` for each chunk of `values` (each row `width` values), prepared once
    /// (GRDB's cache), bound and stepped through SQLite's API.
    static func executeChunked(_ db: Database, width: Int, _ values: [Value], _ sql: (Int) -> String) throws {
        var start = 0
        while start < values.count {
            let end = min(values.count, start + chunk * width)
            let statement = try db.cachedStatement(sql: sql((end - start) / width))
            bind(values[start..<end], to: statement)
            try step(statement, in: db)
            start = end
        }
    }

    /// One result row of a statement stepped through SQLite's API.
    struct RawRow {
        let handle: OpaquePointer

        subscript(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
        subscript(_ column: Int32) -> String { sqlite3_column_text(handle, column).map { String(cString: $0) } ?? "" }
        subscript(_ column: Int32) -> String? {
            sqlite3_column_type(handle, column) == SQLITE_NULL ? nil : sqlite3_column_text(handle, column).map { String(cString: $0) }
        }
    }

    /// The rows of `sql(n)` for each chunk of `values` (each row `width` values), stepped
    /// through SQLite's API (GRDB would check its own, empty, arguments against the statement).
    static func selectChunked(_ db: Database, width: Int, _ values: [Value], _ sql: (Int) -> String, _ row: (RawRow) -> Void) throws {
        var start = 0
        while start < values.count {
            let end = min(values.count, start + chunk * width)
            let statement = try db.cachedStatement(sql: sql((end - start) / width))
            let handle = statement.sqliteStatement
            bind(values[start..<end], to: statement)
            defer { sqlite3_reset(handle) }
            while true {
                let code = sqlite3_step(handle)
                if code == SQLITE_DONE { break }
                guard code == SQLITE_ROW else {
                    throw DatabaseError(
                        resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)), sql: statement.sql)
                }
                row(RawRow(handle: handle))
            }
            start = end
        }
    }

    private struct Key: Hashable {
        var sender: String
        var id: String
    }

    /// A line of a user's conversation list.
    private struct Line: Hashable {
        var user: String
        var peer: String
    }

    /// The last offset given out in each of `streams`: the newest entry's, or what a deletion
    /// left in `stream` when it is higher (0 for a stream never written).
    static func heads(of streams: [String], in db: Database) throws -> [String: Int64] {
        var last: [String: Int64] = [:]
        last.reserveCapacity(streams.count)
        try selectChunked(db, width: 1, streams.map { .text($0) }, {
            rows("SELECT k.column1, max(coalesce((SELECT max(offset) FROM entry WHERE stream = k.column1), 0), coalesce((SELECT last FROM stream WHERE name = k.column1), 0)) FROM (VALUES ", "(?)", $0, ") AS k")
        }) { row in last[row[0]] = row[1] }
        return last
    }

    /// Keeps in `stream` how far the entries about to be deleted reach (`where`: which,
    /// over `entry`), so that their offsets are never given out again.
    static func keepHeads(deleting condition: String, _ arguments: StatementArguments, in db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO stream(name, last) SELECT stream, max(offset) FROM entry WHERE \(condition) GROUP BY stream
                ON CONFLICT(name) DO UPDATE SET last = max(last, excluded.last)
                """, arguments: arguments)
    }

    /// The transaction's work (GRDB wraps it in BEGIN IMMEDIATE ... COMMIT), a few multi-row
    /// statements per batch: find the messages stored before, give the new ones their ids and
    /// offsets (the one writer holds the database), insert them and their entries, move the
    /// streams' counters, save the positions.
    /// Returns the outcomes and what the writer is to remember once COMMIT has returned (the
    /// next id, the streams' last offsets); reads from the file only what `memory` lacks.
    static func commit(
        _ messages: [ArchiveMessage], positions: [DevicePosition], memory: WriterMemory, in db: Database
    ) throws -> (outcomes: [AppendOutcome], learned: WriterMemory) {
        var outcomes = [AppendOutcome?](repeating: nil, count: messages.count)
        // 1. Messages stored before (resends, reused ids).
        var known: [Key: (id: Int64, fingerprint: Int64, serverTime: Int64)] = [:]
        try selectChunked(db, width: 2, messages.flatMap { [.text($0.sender), .text($0.messageID)] as [Value] }, {
            rows("SELECT m.id, m.sender, m.message_id, m.fingerprint, m.server_time FROM (VALUES ", "(?, ?)", $0,
                 ") AS k JOIN message m ON m.sender = k.column1 AND m.message_id = k.column2")
        }) { row in known[Key(sender: row[1], id: row[2])] = (row[0], row[3], row[4]) }
        // 2. New messages get the next ids; a repeat within the batch is a duplicate of the first.
        var nextID = try memory.nextID ?? (Int64.fetchOne(db.cachedStatement(sql: "SELECT max(id) FROM message")) ?? 0) + 1
        var ids = [Int64](repeating: 0, count: messages.count)
        var firstInBatch: [Key: Int] = [:]
        var messageValues: [Value] = []
        messageValues.reserveCapacity(messages.count * 6)
        var streams = Set<String>()
        for (index, message) in messages.enumerated() {
            let key = Key(sender: message.sender, id: message.messageID)
            let fingerprint = Int64(bitPattern: message.fingerprint)
            if let stored = known[key] {
                outcomes[index] = stored.fingerprint == fingerprint ? .duplicate([], serverTime: UInt64(stored.serverTime)) : .reused
                ids[index] = stored.id
            } else if let earlier = firstInBatch[key] {
                outcomes[index] = messages[earlier].fingerprint == message.fingerprint
                    ? .duplicate([], serverTime: messages[earlier].serverTime) : .reused
                ids[index] = ids[earlier]
            } else {
                firstInBatch[key] = index
                ids[index] = nextID
                messageValues += [
                    .integer(nextID), .text(message.sender), .text(message.messageID), .integer(fingerprint),
                    .integer(Int64(clamping: message.serverTime)), .blob(message.body),
                ]
                nextID += 1
                for copy in message.copies { streams.insert(copy.stream) }
            }
        }
        try executeChunked(db, width: 6, messageValues) {
            rows("INSERT INTO message(id, sender, message_id, fingerprint, server_time, body) VALUES ", "(?, ?, ?, ?, ?, ?)", $0)
        }
        // 3. Each stream's last offset, read once (``heads(of:in:)``), moved on copy by copy in
        // the batch's order.
        var last: [String: Int64] = [:]
        last.reserveCapacity(streams.count)
        var unknown: [String] = []
        for stream in streams {
            if let known = memory.heads[stream] { last[stream] = known } else { unknown.append(stream) }
        }
        if !unknown.isEmpty {
            unknown.sort()
            for (stream, head) in try heads(of: unknown, in: db) { last[stream] = head }
        }
        var entries: [(stream: String, offset: Int64, message: Int64, origin: String?, conversation: String?)] = []
        entries.reserveCapacity(firstInBatch.count * 2)
        var lines = Set<Line>()
        for (index, message) in messages.enumerated() where outcomes[index] == nil {
            var offsets: [UInt64] = []
            offsets.reserveCapacity(message.copies.count)
            for copy in message.copies {
                let offset = (last[copy.stream] ?? 0) + 1
                last[copy.stream] = offset
                let conversation = copy.conversation?.key
                entries.append((copy.stream, offset, ids[index], copy.origin, conversation))
                offsets.append(UInt64(offset))
                if let conversation { lines.insert(Line(user: copy.stream, peer: conversation)) }
            }
            outcomes[index] = .stored(offsets)
        }
        // In key order: consecutive rows land on the same pages.
        entries.sort { ($0.stream, $0.offset) < ($1.stream, $1.offset) }
        var entryValues: [Value] = []
        entryValues.reserveCapacity(entries.count * 5)
        for entry in entries {
            entryValues += [
                .text(entry.stream), .integer(entry.offset), .integer(entry.message), entry.origin.map { .text($0) } ?? .null,
                entry.conversation.map { .text($0) } ?? .null,
            ]
        }
        try executeChunked(db, width: 5, entryValues) {
            rows("INSERT INTO entry(stream, offset, message, origin, conversation) VALUES ", "(?, ?, ?, ?, ?)", $0)
        }
        // A line of a conversation list is written once, when the conversation starts (its
        // newest message and unread count are read from the entries).
        try executeChunked(db, width: 2, lines.sorted { ($0.user, $0.peer) < ($1.user, $1.peer) }.flatMap { [.text($0.user), .text($0.peer)] as [Value] }) {
            rows("INSERT INTO conversation(user, peer, read_through) VALUES ", "(?, ?, 0)", $0, " ON CONFLICT(user, peer) DO NOTHING")
        }
        // 4. Where the duplicates' copies are (a repeat within the batch: the copies just made).
        var duplicates: [Int: Int64] = [:]
        for (index, outcome) in outcomes.enumerated() { if case .duplicate? = outcome { duplicates[index] = ids[index] } }
        if !duplicates.isEmpty {
            var copies: [Int64: [StoredCopy]] = [:]
            try selectChunked(db, width: 1, Array(Set(duplicates.values)).map { .integer($0) }, {
                rows("SELECT message, stream, offset, origin FROM entry WHERE message IN (", "?", $0, ")")
            }) { row in copies[row[0], default: []].append(StoredCopy(stream: row[1], offset: UInt64(row[2] as Int64), origin: row[3])) }
            for (index, id) in duplicates {
                if case .duplicate(_, let serverTime)? = outcomes[index] { outcomes[index] = .duplicate(copies[id] ?? [], serverTime: serverTime) }
            }
        }
        // 5. Positions (one per device in a batch), never moved back.
        if !positions.isEmpty {
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let values = positions.flatMap { [.text($0.user), .text($0.device), .integer(Int64(clamping: $0.offset)), .integer(now)] as [Value] }
            try executeChunked(db, width: 4, values) {
                rows("INSERT INTO position(user, device, offset, updated) VALUES ", "(?, ?, ?, ?)", $0,
                     " ON CONFLICT(user, device) DO UPDATE SET offset = max(offset, excluded.offset), updated = excluded.updated")
            }
        }
        return (outcomes.map { $0! }, WriterMemory(nextID: nextID, heads: last))
    }

    public func read(stream: String, after: UInt64, through: UInt64, limit: Int) async throws -> [StoredEntry] {
        guard through > after, limit > 0 else { return [] }
        return try await pool.read { db in
            let statement = try db.cachedStatement(sql: """
                SELECT e.offset, e.origin, m.sender, m.message_id, m.server_time, m.body
                FROM entry e JOIN message m ON m.id = e.message
                WHERE e.stream = ? AND e.offset > ? AND e.offset <= ? ORDER BY e.offset LIMIT ?
                """)
            let rows = try Row.fetchCursor(
                statement, arguments: [stream, Int64(clamping: after), Int64(clamping: through), limit])
            var entries: [StoredEntry] = []
            while let row = try rows.next() {
                let body: Data = row[5]
                entries.append(StoredEntry(
                    stream: stream, offset: UInt64(row[0] as Int64), origin: row[1], sender: row[2], messageID: row[3],
                    serverTime: UInt64(row[4] as Int64), body: [UInt8](body)))
            }
            return entries
        }
    }

    public func history(stream: String, conversation: Conversation, position: HistoryPosition, limit: Int) async throws -> HistoryPage {
        guard limit > 0 else { return HistoryPage(entries: [], complete: false) }
        return try await pool.read { db in
            // One more than asked: whether it exists says whether the page is the last.
            let (condition, order, bound): (String, String, Int64) = switch position {
            case .latest: ("e.offset <= ?", "DESC", Int64.max)
            case .before(let offset): ("e.offset < ?", "DESC", Int64(clamping: offset))
            case .after(let offset): ("e.offset > ?", "ASC", Int64(clamping: offset))
            }
            let statement = try db.cachedStatement(sql: """
                SELECT e.offset, e.origin, m.sender, m.message_id, m.server_time, m.body
                FROM entry e JOIN message m ON m.id = e.message
                WHERE e.stream = ? AND e.conversation = ? AND e.kind IS NULL AND \(condition) ORDER BY e.offset \(order) LIMIT ?
                """)
            let rows = try Row.fetchCursor(statement, arguments: [stream, conversation.key, bound, limit + 1])
            var entries: [StoredEntry] = []
            while let row = try rows.next() {
                let body: Data = row[5]
                entries.append(StoredEntry(
                    stream: stream, offset: UInt64(row[0] as Int64), origin: row[1], sender: row[2], messageID: row[3],
                    serverTime: UInt64(row[4] as Int64), body: [UInt8](body), conversation: conversation))
            }
            let complete = entries.count <= limit
            entries = Array(entries.prefix(limit))
            if order == "DESC" { entries.reverse() }
            return HistoryPage(entries: entries, complete: complete)
        }
    }

    public func conversations(user: String, before: UInt64?, limit: Int) async throws -> ConversationPage {
        guard limit > 0 else { return ConversationPage(conversations: [], complete: false) }
        return try await pool.read { db in
            // Each conversation's newest message: one step back from the end of its range of
            // `entry_conversation` (tombstones skipped); then the page, most recent first.
            let newest = try db.cachedStatement(sql: """
                SELECT c.peer, c.read_through,
                  (SELECT e.offset FROM entry e INDEXED BY entry_conversation
                   WHERE e.stream = c.user AND e.conversation = c.peer AND e.kind IS NULL ORDER BY e.offset DESC LIMIT 1)
                FROM conversation c WHERE c.user = ?
                """)
            var lines: [(peer: String, readThrough: Int64, last: Int64)] = []
            let bound = before.map { Int64(clamping: $0) } ?? Int64.max
            let rows = try Row.fetchCursor(newest, arguments: [user])
            while let row = try rows.next() {
                guard let last = row[2] as Int64?, last < bound else { continue }
                lines.append((row[0], row[1], last))
            }
            lines.sort { $0.last > $1.last }
            let complete = lines.count <= limit
            var summaries: [ConversationSummary] = []
            for line in lines.prefix(limit) {
                guard let conversation = Conversation(key: line.peer) else { continue }
                let (readThrough, unread) = try Self.unread(user: user, conversation: line.peer, marker: line.readThrough, in: db)
                let last = try Self.entry(stream: user, offset: line.last, conversation: conversation, in: db)
                summaries.append(ConversationSummary(
                    conversation: conversation, lastOffset: UInt64(line.last), lastTime: last?.serverTime ?? 0, last: last,
                    readThrough: UInt64(readThrough), unread: unread))
            }
            return ConversationPage(conversations: summaries, complete: complete)
        }
    }

    /// How far `user` has read `conversation` (the marker, or the newest message the user sent
    /// from a device, whichever is later) and the messages from others after it, counted in
    /// `entry_conversation` alone.
    static func unread(user: String, conversation: String, marker: Int64, in db: Database) throws -> (readThrough: Int64, unread: Int) {
        let ownStatement = try db.cachedStatement(sql: """
            SELECT offset FROM entry INDEXED BY entry_conversation
            WHERE stream = ? AND conversation = ? AND origin IS NOT NULL AND kind IS NULL ORDER BY offset DESC LIMIT 1
            """)
        let own = try Int64.fetchOne(ownStatement, arguments: [user, conversation]) ?? 0
        let readThrough = max(marker, own)
        let countStatement = try db.cachedStatement(sql: """
            SELECT count(*) FROM entry INDEXED BY entry_conversation
            WHERE stream = ? AND conversation = ? AND offset > ? AND origin IS NULL AND kind IS NULL
            """)
        let unread = try Int.fetchOne(countStatement, arguments: [user, conversation, readThrough]) ?? 0
        return (readThrough, unread)
    }

    /// The entry at `offset` of `stream`, with its message.
    static func entry(stream: String, offset: Int64, conversation: Conversation?, in db: Database) throws -> StoredEntry? {
        let statement = try db.cachedStatement(sql: """
            SELECT e.origin, m.sender, m.message_id, m.server_time, m.body
            FROM entry e JOIN message m ON m.id = e.message WHERE e.stream = ? AND e.offset = ?
            """)
        guard let row = try Row.fetchOne(statement, arguments: [stream, offset]) else { return nil }
        let body: Data = row[4]
        return StoredEntry(
            stream: stream, offset: UInt64(offset), origin: row[0], sender: row[1], messageID: row[2],
            serverTime: UInt64(row[3] as Int64), body: [UInt8](body), conversation: conversation)
    }

    public func markRead(user: String, conversation: Conversation, through: UInt64) async throws -> ReadMarkOutcome {
        try await write { db in
            guard let marker = try Int64.fetchOne(
                db, sql: "SELECT read_through FROM conversation WHERE user = ? AND peer = ?", arguments: [user, conversation.key])
            else { return .unknownConversation }
            let last = try Int64.fetchOne(
                db, sql: """
                    SELECT offset FROM entry INDEXED BY entry_conversation
                    WHERE stream = ? AND conversation = ? AND kind IS NULL ORDER BY offset DESC LIMIT 1
                    """, arguments: [user, conversation.key]) ?? 0
            guard through <= UInt64(last) else { return .pastEnd(last: UInt64(last)) }
            if Int64(clamping: through) > marker {
                try db.execute(
                    sql: "UPDATE conversation SET read_through = ? WHERE user = ? AND peer = ?",
                    arguments: [Int64(clamping: through), user, conversation.key])
            }
            let (readThrough, unread) = try Self.unread(user: user, conversation: conversation.key, marker: max(marker, Int64(clamping: through)), in: db)
            return .marked(ReadMarker(conversation: conversation, readThrough: UInt64(readThrough), unread: unread))
        }
    }

    public func deleteMessage(sender: String, messageID: String, at time: UInt64, origin: String?, tombstone: @escaping @Sendable (_ body: [UInt8]) -> [UInt8]) async throws -> DeletedMessage? {
        try await write { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT id, deleted, body FROM message WHERE sender = ? AND message_id = ?", arguments: [sender, messageID])
            else { return nil }
            let id: Int64 = row[0]
            let body: Data = row[2]
            if let deleted = row[1] as Int64? {
                let copies = try Row.fetchAll(db, sql: "SELECT stream, offset, origin FROM entry WHERE message = ? AND kind = 'deleted' ORDER BY stream", arguments: [id])
                    .map { StoredCopy(stream: $0[0], offset: UInt64($0[1] as Int64), origin: $0[2]) }
                return DeletedMessage(tombstones: copies, deletedAt: UInt64(deleted), first: false, body: [UInt8](body))
            }
            let replaced = tombstone([UInt8](body))
            try db.execute(sql: "UPDATE message SET body = ?, deleted = ? WHERE id = ?", arguments: [Data(replaced), Int64(clamping: time), id])
            let originals = try Row.fetchAll(
                db, sql: "SELECT stream, origin, conversation FROM entry WHERE message = ? AND kind IS NULL ORDER BY stream", arguments: [id])
            var copies: [StoredCopy] = []
            for original in originals {
                let stream: String = original[0]
                let last = try Self.heads(of: [stream], in: db)[stream] ?? 0
                // The sender's own copy: from the device that deleted it (which is not sent it).
                let copyOrigin: String? = (original[1] as String?) == nil ? nil : (origin ?? "")
                try db.execute(
                    sql: "INSERT INTO entry(stream, offset, message, origin, conversation, kind) VALUES (?, ?, ?, ?, ?, 'deleted')",
                    arguments: [stream, last + 1, id, copyOrigin, original[2] as String?])
                copies.append(StoredCopy(stream: stream, offset: UInt64(last + 1), origin: copyOrigin))
            }
            self.forgetHeads(of: copies.map(\.stream))
            return DeletedMessage(tombstones: copies, deletedAt: time, first: true, body: replaced)
        }
    }

    public func eraseUser(_ user: String, at time: UInt64, tombstone: @escaping @Sendable (_ body: [UInt8]) -> [UInt8]) async throws -> UserErasure {
        try await write { db in
            var messages = 0
            var after: Int64 = 0
            // In batches by id: the user's sent messages, each body replaced once.
            while true {
                let rows = try Row.fetchAll(
                    db, sql: "SELECT id, body FROM message WHERE sender = ? AND deleted IS NULL AND id > ? ORDER BY id LIMIT 500",
                    arguments: [user, after])
                guard let last = rows.last else { break }
                let update = try db.cachedStatement(sql: "UPDATE message SET body = ?, deleted = ? WHERE id = ?")
                for row in rows {
                    let body: Data = row[1]
                    try update.execute(arguments: [Data(tombstone([UInt8](body))), Int64(clamping: time), row[0] as Int64])
                }
                messages += rows.count
                after = last[0]
            }
            try Self.keepHeads(deleting: "stream = ?", [user], in: db)
            try db.execute(sql: "DELETE FROM entry WHERE stream = ?", arguments: [user])
            let entries = db.changesCount
            try db.execute(sql: "DELETE FROM conversation WHERE user = ?", arguments: [user])
            try db.execute(sql: "DELETE FROM position WHERE user = ?", arguments: [user])
            return UserErasure(messages: messages, entries: entries)
        }
    }

    public func bounds(of stream: String) async throws -> StreamBounds {
        try await pool.read { db in
            let last = UInt64(try Self.heads(of: [stream], in: db)[stream] ?? 0)
            let first = try Int64.fetchOne(db, sql: "SELECT offset FROM entry WHERE stream = ? ORDER BY offset LIMIT 1", arguments: [stream])
            let trimmed = try Int64.fetchOne(db, sql: "SELECT through FROM trimmed WHERE stream = ?", arguments: [stream]) ?? 0
            return StreamBounds(last: last, first: first.map { UInt64($0) } ?? last + 1, trimmedThrough: UInt64(trimmed))
        }
    }

    public func position(user: String, device: String) async throws -> UInt64? {
        try await pool.read { db in
            try Int64.fetchOne(db, sql: "SELECT offset FROM position WHERE user = ? AND device = ?", arguments: [user, device])
                .map { UInt64($0) }
        }
    }

    public func groupMembers(_ group: String) async throws -> [String: UInt64]? {
        try await pool.read { db in
            let rows = try Row.fetchAll(db, sql: "SELECT user, since FROM group_member WHERE grp = ?", arguments: [group])
            guard !rows.isEmpty else { return nil }
            var members: [String: UInt64] = [:]
            for row in rows {
                if let since = row[1] as Int64? { members[row[0]] = UInt64(since) }
            }
            return members
        }
    }

    public func recordGroupMembers(_ group: String, _ changes: [String: UInt64?]) async throws {
        guard !changes.isEmpty else { return }
        try await write { db in
            let statement = try db.cachedStatement(sql: "INSERT OR REPLACE INTO group_member (grp, user, since) VALUES (?, ?, ?)")
            for (user, since) in changes.sorted(by: { $0.key < $1.key }) {
                try statement.execute(arguments: [group, user, since.map { Int64(clamping: $0) }])
            }
        }
    }

    public func deleteMessages(acceptedBefore serverTime: UInt64, limit: Int) async throws -> Int {
        guard limit > 0 else { return 0 }
        return try await write { db in
            // The oldest messages, by id (which grows with time): up to the first that is
            // not old enough.
            let oldest = try Row.fetchAll(db, sql: "SELECT id, server_time FROM message ORDER BY id LIMIT ?", arguments: [limit])
            var through: Int64?
            var count = 0
            for row in oldest {
                guard UInt64(row[1] as Int64) < serverTime else { break }
                through = row[0]
                count += 1
            }
            guard let through else { return 0 }
            try Self.keepHeads(deleting: "message <= ?", [through], in: db)
            try db.execute(sql: "DELETE FROM entry WHERE message <= ?", arguments: [through])
            try db.execute(sql: "DELETE FROM message WHERE id <= ?", arguments: [through])
            return count
        }
    }

    public func trimConversation(stream: String, conversation: Conversation, keep: Int, limit: Int) async throws -> Int {
        guard limit > 0 else { return 0 }
        // The newest entry beyond the cap: it and what is older in the conversation go, the
        // oldest first, `limit` at most. Looked for by a reader first: most conversations a
        // sweep looks at are under the cap, and the writer is the chats'.
        let cutSQL = """
            SELECT offset FROM entry INDEXED BY entry_conversation WHERE stream = ? AND conversation = ? AND kind IS NULL
            ORDER BY offset DESC LIMIT 1 OFFSET ?
            """
        let arguments: StatementArguments = [stream, conversation.key, max(0, keep)]
        guard try await pool.read({ db in try Int64.fetchOne(db, sql: cutSQL, arguments: arguments) }) != nil else { return 0 }
        return try await write { db in
            guard let cut = try Int64.fetchOne(db, sql: cutSQL, arguments: arguments) else { return 0 }
            let doomed = try Row.fetchAll(
                db, sql: """
                    SELECT offset, message FROM entry INDEXED BY entry_conversation WHERE stream = ? AND conversation = ? AND offset <= ?
                    ORDER BY offset LIMIT ?
                    """, arguments: [stream, conversation.key, cut, limit])
            guard let through = doomed.last?[0] as Int64? else { return 0 }
            try Self.keepHeads(deleting: "stream = ? AND offset <= ?", [stream, through], in: db)
            try db.execute(
                sql: "DELETE FROM entry WHERE stream = ? AND conversation = ? AND offset <= ?", arguments: [stream, conversation.key, through])
            let messages = Array(Set(doomed.map { $0[1] as Int64 }))
            try Self.executeChunked(db, width: 1, messages.map { .integer($0) }) {
                Self.rows("DELETE FROM message WHERE id IN (", "?", $0, ") AND NOT EXISTS (SELECT 1 FROM entry WHERE entry.message = message.id)")
            }
            try db.execute(
                sql: "INSERT INTO trimmed(stream, through) VALUES (?, ?) ON CONFLICT(stream) DO UPDATE SET through = max(through, excluded.through)",
                arguments: [stream, through])
            return doomed.count
        }
    }

    public func size() async throws -> ArchiveSize {
        let counts = try await pool.read { db in
            (try Int.fetchOne(db, sql: "SELECT count(*) FROM message") ?? 0, try Int.fetchOne(db, sql: "SELECT count(*) FROM entry") ?? 0)
        }
        var bytes = 0
        for suffix in ["", "-wal"] {
            let attributes = try? FileManager.default.attributesOfItem(atPath: path + suffix)
            bytes += (attributes?[.size] as? NSNumber)?.intValue ?? 0
        }
        return ArchiveSize(messages: counts.0, entries: counts.1, bytes: bytes)
    }

    public func close() async {
        checkpointer.stop()
        try? pool.close()
    }
}
