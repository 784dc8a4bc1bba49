import Foundation
import GRDB

/// The archive of one gateway: a SQLite file in WAL mode, through GRDB (a `DatabasePool`:
/// one writer and concurrent readers, so that catching a device up never waits for a
/// commit, and a commit never waits for a reader).
///
/// Tables (``schema``): `message` holds each body once; `entry` places a message in a user's
/// stream at an offset (one row per recipient, group member and the sender's own copy);
/// `stream` holds each stream's last offset (which retention never lowers); `position` each
/// device's saved position; `meta` the epoch.
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

    public var description: String { "sqlite \(path)" }

    /// What `meta.kind` says in a file that is an imgw archive.
    static let kind = "imgw-archive"

    private init(pool: DatabasePool, path: String, epoch: ArchiveEpoch) {
        self.pool = pool
        self.path = path
        self.epoch = epoch
    }

    /// Opens (creating it, and its directory, if need be) the archive at `path`.
    ///
    /// Throws ``ArchiveError`` `misconfigured` when the file cannot be created or opened
    /// (a directory that cannot be made, no permission), `corrupt` when the file is not an
    /// imgw archive or was written by a newer imgw.
    public static func open(path: String, synchronous: Synchronous = .normal) throws(ArchiveError) -> SQLiteArchiveStore {
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
            // The WAL is truncated back to this size after a checkpoint (it would otherwise
            // keep the size of its largest burst).
            try db.execute(sql: "PRAGMA journal_size_limit = 67108864")
        }
        let pool: DatabasePool
        do {
            pool = try DatabasePool(path: path, configuration: configuration)
        } catch {
            throw ArchiveError(.misconfigured, "cannot open the archive \(path): \(error)")
        }
        do {
            let epoch = try Self.migrate(pool)
            return SQLiteArchiveStore(pool: pool, path: path, epoch: epoch)
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

    public func commit(_ messages: [ArchiveMessage], positions: [DevicePosition]) async throws -> [AppendOutcome] {
        try await pool.write { db in try Self.commit(messages, positions: positions, in: db) }
    }

    /// The transaction's work (GRDB wraps it in BEGIN IMMEDIATE ... COMMIT).
    static func commit(_ messages: [ArchiveMessage], positions: [DevicePosition], in db: Database) throws -> [AppendOutcome] {
        var outcomes: [AppendOutcome] = []
        outcomes.reserveCapacity(messages.count)
        // Each stream's last offset, read once per transaction (the one writer holds it).
        var last: [String: Int64] = [:]
        let findMessage = try db.cachedStatement(sql: "SELECT id, fingerprint, server_time FROM message WHERE sender = ? AND message_id = ?")
        let insertMessage = try db.cachedStatement(
            sql: "INSERT INTO message(sender, message_id, fingerprint, server_time, body) VALUES (?, ?, ?, ?, ?)")
        let readLast = try db.cachedStatement(sql: "SELECT last FROM stream WHERE name = ?")
        let insertEntry = try db.cachedStatement(sql: "INSERT INTO entry(stream, offset, message, origin) VALUES (?, ?, ?, ?)")
        for message in messages {
            let fingerprint = Int64(bitPattern: message.fingerprint)
            if let row = try Row.fetchOne(findMessage, arguments: [message.sender, message.messageID]) {
                let id: Int64 = row[0]
                guard row[1] as Int64 == fingerprint else {
                    outcomes.append(.reused)
                    continue
                }
                let copies = try Row.fetchAll(db, sql: "SELECT stream, offset, origin FROM entry WHERE message = ?", arguments: [id])
                outcomes.append(.duplicate(
                    copies.map { StoredCopy(stream: $0[0], offset: UInt64($0[1] as Int64), origin: $0[2]) },
                    serverTime: UInt64(row[2] as Int64)))
                continue
            }
            try insertMessage.execute(arguments: [
                message.sender, message.messageID, fingerprint, Int64(clamping: message.serverTime), Data(message.body),
            ])
            let id = db.lastInsertedRowID
            var offsets: [UInt64] = []
            offsets.reserveCapacity(message.copies.count)
            for copy in message.copies {
                let previous: Int64
                if let known = last[copy.stream] {
                    previous = known
                } else {
                    previous = try Int64.fetchOne(readLast, arguments: [copy.stream]) ?? 0
                }
                let offset = previous + 1
                last[copy.stream] = offset
                try insertEntry.execute(arguments: [copy.stream, offset, id, copy.origin])
                offsets.append(UInt64(offset))
            }
            outcomes.append(.stored(offsets))
        }
        if !last.isEmpty {
            let saveLast = try db.cachedStatement(
                sql: "INSERT INTO stream(name, last) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET last = excluded.last")
            for (stream, offset) in last { try saveLast.execute(arguments: [stream, offset]) }
        }
        if !positions.isEmpty {
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let save = try db.cachedStatement(sql: """
                INSERT INTO position(user, device, offset, updated) VALUES (?, ?, ?, ?)
                ON CONFLICT(user, device) DO UPDATE SET offset = max(offset, excluded.offset), updated = excluded.updated
                """)
            for position in positions {
                try save.execute(arguments: [position.user, position.device, Int64(clamping: position.offset), now])
            }
        }
        return outcomes
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

    public func bounds(of stream: String) async throws -> StreamBounds {
        try await pool.read { db in
            let last = UInt64(try Int64.fetchOne(db, sql: "SELECT last FROM stream WHERE name = ?", arguments: [stream]) ?? 0)
            let first = try Int64.fetchOne(db, sql: "SELECT offset FROM entry WHERE stream = ? ORDER BY offset LIMIT 1", arguments: [stream])
            return StreamBounds(last: last, first: first.map { UInt64($0) } ?? last + 1)
        }
    }

    public func position(user: String, device: String) async throws -> UInt64? {
        try await pool.read { db in
            try Int64.fetchOne(db, sql: "SELECT offset FROM position WHERE user = ? AND device = ?", arguments: [user, device])
                .map { UInt64($0) }
        }
    }

    public func deleteMessages(acceptedBefore serverTime: UInt64, limit: Int) async throws -> Int {
        guard limit > 0 else { return 0 }
        return try await pool.write { db in
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
            try db.execute(sql: "DELETE FROM entry WHERE message <= ?", arguments: [through])
            try db.execute(sql: "DELETE FROM message WHERE id <= ?", arguments: [through])
            return count
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
        try? pool.close()
    }
}
