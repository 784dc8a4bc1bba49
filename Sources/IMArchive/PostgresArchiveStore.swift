import Foundation
import Logging
import NIOCore
import PostgresNIO

/// The archive of several gateways: tables in a PostgreSQL database (`archive.url`), through
/// postgres-nio's connection pool. Every gateway writes to it; a device catches up from it
/// whichever gateway it reaches.
///
/// Offsets in commit order: a commit adds to each stream's row in `imgw_stream` (`last =
/// last + n`), which locks that row until the commit; a concurrent commit to the same stream
/// waits for it and then continues from its `last`. So offset n+1 of a stream never commits
/// before n, and a reader polling "after my last offset" misses nothing. (A shared sequence
/// would not give that: sequence values are taken at insert time and commit in any order.)
/// The streams are locked in name order, so two commits cannot deadlock over them; one that
/// deadlocks or fails to serialize anyway is tried again.
///
/// Tables (``schema``), all named `imgw_*` so that they can share a database with the app's:
/// `imgw_message` (each body once), `imgw_entry` (a message at an offset of a stream),
/// `imgw_stream` (each stream's last offset), `imgw_position` (devices' positions),
/// `imgw_meta` (the epoch).
public final class PostgresArchiveStore: ArchiveStore {
    public let epoch: ArchiveEpoch
    private let client: PostgresClient
    private let runner: Task<Void, Never>
    private let logger: Logger
    private let endpoint: String

    public var description: String { "postgresql \(endpoint)" }

    private init(client: PostgresClient, runner: Task<Void, Never>, epoch: ArchiveEpoch, endpoint: String, logger: Logger) {
        self.client = client
        self.runner = runner
        self.epoch = epoch
        self.endpoint = endpoint
        self.logger = logger
    }

    /// Connects to `url` (`postgres://USER:PASSWORD@HOST:PORT/DATABASE`, with `?sslmode=`
    /// `disable`, `prefer` or `require`), creates the tables if they are missing, and reads
    /// the epoch. Throws ``ArchiveError`` `misconfigured` for a URL that is not one,
    /// `unavailable` when the server cannot be reached or refuses, `corrupt` for tables of a
    /// newer imgw.
    public static func open(url: String, maxConnections: Int = 8, logger: Logger) async throws(ArchiveError) -> PostgresArchiveStore {
        let settings = try PostgresURL(url)
        var configuration = PostgresClient.Configuration(
            host: settings.host, port: settings.port, username: settings.user, password: settings.password,
            database: settings.database, tls: settings.tls)
        configuration.options.maximumConnections = max(2, maxConnections)
        configuration.options.connectTimeout = .seconds(5)
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        let runner = Task { await client.run() }
        do {
            let epoch = try await MessageArchive.within(.seconds(15)) { try await prepare(client, logger: logger) }.get()
            return PostgresArchiveStore(client: client, runner: runner, epoch: epoch, endpoint: settings.redacted, logger: logger)
        } catch {
            runner.cancel()
            if let error = error as? ArchiveError { throw error }
            throw ArchiveError(.unavailable, "cannot use the archive at \(settings.redacted): \(Self.explain(error))", retryAfter: 1_000)
        }
    }

    /// The tables, created if missing (docs/OPERATIONS.md, "PostgreSQL").
    static let schema = [
        "CREATE TABLE IF NOT EXISTS imgw_meta (key text PRIMARY KEY, value text NOT NULL)",
        """
        CREATE TABLE IF NOT EXISTS imgw_message (
          id bigserial PRIMARY KEY, sender text NOT NULL, message_id text NOT NULL,
          fingerprint bigint NOT NULL, server_time bigint NOT NULL, body bytea NOT NULL,
          UNIQUE (sender, message_id))
        """,
        """
        CREATE TABLE IF NOT EXISTS imgw_entry (
          stream text NOT NULL, off bigint NOT NULL, message bigint NOT NULL, origin text,
          PRIMARY KEY (stream, off))
        """,
        "CREATE INDEX IF NOT EXISTS imgw_entry_message ON imgw_entry (message)",
        "CREATE TABLE IF NOT EXISTS imgw_stream (name text PRIMARY KEY, last bigint NOT NULL)",
        """
        CREATE TABLE IF NOT EXISTS imgw_position (
          user_id text NOT NULL, device text NOT NULL, off bigint NOT NULL, updated bigint NOT NULL,
          PRIMARY KEY (user_id, device))
        """,
    ]

    /// The schema version this imgw writes.
    static let schemaVersion = "1"

    /// Creates the tables (one gateway at a time: an advisory lock) and returns the epoch.
    private static func prepare(_ client: PostgresClient, logger: Logger) async throws -> ArchiveEpoch {
        try await client.withTransaction(logger: logger) { connection in
            // 0x696d6777 "imgw": gateways starting together create the tables once.
            try await connection.query("SELECT pg_advisory_xact_lock(1768777591)", logger: logger)
            for statement in schema { try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger) }
            let epoch = String(ArchiveEpoch.random().rawValue)
            try await connection.query(
                "INSERT INTO imgw_meta (key, value) VALUES ('epoch', \(epoch)), ('schema', \(schemaVersion)) ON CONFLICT (key) DO NOTHING",
                logger: logger)
            var values: [String: String] = [:]
            for try await (key, value) in try await connection.query("SELECT key, value FROM imgw_meta", logger: logger).decode((String, String).self) {
                values[key] = value
            }
            if let schema = values["schema"], schema != schemaVersion {
                throw ArchiveError(.corrupt, "the archive's tables are of schema \(schema), written by another imgw version (this one writes \(schemaVersion))")
            }
            guard let text = values["epoch"], let number = UInt64(text), let epoch = ArchiveEpoch(rawValue: number) else {
                throw ArchiveError(.corrupt, "imgw_meta holds no valid epoch: the tables are not an imgw archive")
            }
            return epoch
        }
    }

    // MARK: Commit

    public func commit(_ messages: [ArchiveMessage], positions: [DevicePosition]) async throws -> [AppendOutcome] {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await client.withTransaction(logger: logger) { connection in
                    try await Self.commit(messages, positions: positions, on: connection, logger: logger)
                }
            } catch let error as PostgresTransactionError where attempt < 4 && Self.isRetriable(error) {
                logger.debug("archive commit retried", metadata: ["error": "\(Self.explain(error))", "attempt": "\(attempt)"])
            } catch {
                throw ArchiveError(.unavailable, Self.explain(error), retryAfter: 1_000)
            }
        }
    }

    /// A deadlock or a serialization failure: the transaction can simply run again.
    private static func isRetriable(_ error: PostgresTransactionError) -> Bool {
        for inner in [error.closureError, error.commitError] {
            if let psql = inner as? PSQLError, let state = psql.serverInfo?[.sqlState], state == "40P01" || state == "40001" { return true }
        }
        return false
    }

    private static func commit(
        _ messages: [ArchiveMessage], positions: [DevicePosition], on connection: PostgresConnection, logger: Logger
    ) async throws -> [AppendOutcome] {
        var outcomes = [AppendOutcome?](repeating: nil, count: messages.count)
        // 1. Messages stored before (resends, reused ids), and repeats within the batch.
        struct Key: Hashable { var sender: String; var id: String }
        var known: [Key: (id: Int64, fingerprint: Int64, serverTime: Int64)] = [:]
        if !messages.isEmpty {
            let senders = messages.map(\.sender)
            let ids = messages.map(\.messageID)
            let rows = try await connection.query("""
                SELECT m.id, m.sender, m.message_id, m.fingerprint, m.server_time FROM imgw_message m
                JOIN unnest(\(senders)::text[], \(ids)::text[]) AS k(sender, message_id)
                  ON m.sender = k.sender AND m.message_id = k.message_id
                """, logger: logger)
            for try await (id, sender, messageID, fingerprint, serverTime) in rows.decode((Int64, String, String, Int64, Int64).self) {
                known[Key(sender: sender, id: messageID)] = (id, fingerprint, serverTime)
            }
        }
        var fresh: [Int] = []
        var firstInBatch: [Key: Int] = [:]
        for (index, message) in messages.enumerated() {
            let key = Key(sender: message.sender, id: message.messageID)
            if let stored = known[key] {
                outcomes[index] = stored.fingerprint == Int64(bitPattern: message.fingerprint)
                    ? .duplicate([], serverTime: UInt64(stored.serverTime)) : .reused
            } else if let earlier = firstInBatch[key] {
                outcomes[index] = messages[earlier].fingerprint == message.fingerprint
                    ? .duplicate([], serverTime: messages[earlier].serverTime) : .reused
            } else {
                firstInBatch[key] = index
                fresh.append(index)
            }
        }
        // 2. The new messages' bodies.
        var rowIDs: [Key: Int64] = [:]
        if !fresh.isEmpty {
            let rows = try await connection.query("""
                INSERT INTO imgw_message (sender, message_id, fingerprint, server_time, body)
                SELECT * FROM unnest(\(fresh.map { messages[$0].sender })::text[], \(fresh.map { messages[$0].messageID })::text[],
                  \(fresh.map { Int64(bitPattern: messages[$0].fingerprint) })::int8[],
                  \(fresh.map { Int64(clamping: messages[$0].serverTime) })::int8[],
                  \(fresh.map { ByteBuffer(bytes: messages[$0].body) })::bytea[])
                ON CONFLICT (sender, message_id) DO NOTHING
                RETURNING id, sender, message_id
                """, logger: logger)
            for try await (id, sender, messageID) in rows.decode((Int64, String, String).self) {
                rowIDs[Key(sender: sender, id: messageID)] = id
            }
        }
        // A resend stored by another gateway a moment ago: a duplicate (its copies are read below).
        var raced: [Int] = []
        fresh.removeAll { index in
            let message = messages[index]
            guard rowIDs[Key(sender: message.sender, id: message.messageID)] == nil else { return false }
            raced.append(index)
            return true
        }
        // 3. Offsets: each stream's counter moved on by its copies, streams in name order.
        var counts: [String: Int64] = [:]
        for index in fresh { for copy in messages[index].copies { counts[copy.stream, default: 0] += 1 } }
        var next: [String: Int64] = [:]
        if !counts.isEmpty {
            let names = counts.keys.sorted()
            let rows = try await connection.query("""
                INSERT INTO imgw_stream (name, last)
                SELECT * FROM unnest(\(names)::text[], \(names.map { counts[$0]! })::int8[]) ORDER BY 1
                ON CONFLICT (name) DO UPDATE SET last = imgw_stream.last + EXCLUDED.last
                RETURNING name, last
                """, logger: logger)
            for try await (name, last) in rows.decode((String, Int64).self) {
                next[name] = last - counts[name]! + 1
            }
        }
        // 4. The entries, in the batch's order within each stream.
        var streams: [String] = [], offsets: [Int64] = [], ids: [Int64] = [], origins: [String] = []
        for index in fresh {
            let message = messages[index]
            let id = rowIDs[Key(sender: message.sender, id: message.messageID)]!
            var given: [UInt64] = []
            for copy in message.copies {
                let offset = next[copy.stream]!
                next[copy.stream] = offset + 1
                streams.append(copy.stream)
                offsets.append(offset)
                ids.append(id)
                origins.append(copy.origin ?? "")
                given.append(UInt64(offset))
            }
            outcomes[index] = .stored(given)
        }
        if !streams.isEmpty {
            try await connection.query("""
                INSERT INTO imgw_entry (stream, off, message, origin)
                SELECT s, o, m, NULLIF(g, '') FROM unnest(\(streams)::text[], \(offsets)::int8[], \(ids)::int8[], \(origins)::text[]) AS e(s, o, m, g)
                """, logger: logger)
        }
        // 5. A resend another gateway stored a moment ago (its insert won): a duplicate, or a
        // reused id.
        if !raced.isEmpty {
            let rows = try await connection.query("""
                SELECT m.id, m.sender, m.message_id, m.fingerprint, m.server_time FROM imgw_message m
                JOIN unnest(\(raced.map { messages[$0].sender })::text[], \(raced.map { messages[$0].messageID })::text[]) AS k(sender, message_id)
                  ON m.sender = k.sender AND m.message_id = k.message_id
                """, logger: logger)
            for try await (id, sender, messageID, fingerprint, serverTime) in rows.decode((Int64, String, String, Int64, Int64).self) {
                known[Key(sender: sender, id: messageID)] = (id, fingerprint, serverTime)
            }
            for index in raced {
                let message = messages[index]
                guard let stored = known[Key(sender: message.sender, id: message.messageID)] else {
                    throw ArchiveError(.unavailable, "message \(message.messageID) of \(message.sender) vanished while it was stored", retryAfter: 100)
                }
                outcomes[index] = stored.fingerprint == Int64(bitPattern: message.fingerprint)
                    ? .duplicate([], serverTime: UInt64(stored.serverTime)) : .reused
            }
        }
        // 6. Where each duplicate's copies are (a repeat within the batch: the copies just made).
        var duplicateOf: [Int: Int64] = [:]
        for (index, message) in messages.enumerated() {
            guard case .duplicate? = outcomes[index] else { continue }
            let key = Key(sender: message.sender, id: message.messageID)
            if let id = known[key]?.id ?? rowIDs[key] { duplicateOf[index] = id }
        }
        if !duplicateOf.isEmpty {
            var copies: [Int64: [StoredCopy]] = [:]
            let rows = try await connection.query(
                "SELECT message, stream, off, origin FROM imgw_entry WHERE message = ANY(\(Array(Set(duplicateOf.values)))::int8[])",
                logger: logger)
            for try await (message, stream, offset, origin) in rows.decode((Int64, String, Int64, String?).self) {
                copies[message, default: []].append(StoredCopy(stream: stream, offset: UInt64(offset), origin: origin))
            }
            for (index, id) in duplicateOf {
                if case .duplicate(_, let serverTime)? = outcomes[index] {
                    outcomes[index] = .duplicate(copies[id] ?? [], serverTime: serverTime)
                }
            }
        }
        // 7. Positions, in key order.
        if !positions.isEmpty {
            let sorted = positions.sorted { ($0.user, $0.device) < ($1.user, $1.device) }
            let now = MessageArchive.wallMilliseconds()
            try await connection.query("""
                INSERT INTO imgw_position (user_id, device, off, updated)
                SELECT u, d, o, \(now) FROM unnest(\(sorted.map(\.user))::text[], \(sorted.map(\.device))::text[],
                  \(sorted.map { Int64(clamping: $0.offset) })::int8[]) AS p(u, d, o)
                ON CONFLICT (user_id, device) DO UPDATE SET off = GREATEST(imgw_position.off, EXCLUDED.off), updated = EXCLUDED.updated
                """, logger: logger)
        }
        return outcomes.map { $0! }
    }

    // MARK: Reads

    public func read(stream: String, after: UInt64, through: UInt64, limit: Int) async throws -> [StoredEntry] {
        guard through > after, limit > 0 else { return [] }
        let rows = try await client.query("""
            SELECT e.off, e.origin, m.sender, m.message_id, m.server_time, m.body
            FROM imgw_entry e JOIN imgw_message m ON m.id = e.message
            WHERE e.stream = \(stream) AND e.off > \(Int64(clamping: after)) AND e.off <= \(Int64(clamping: through))
            ORDER BY e.off LIMIT \(limit)
            """, logger: logger)
        var entries: [StoredEntry] = []
        for try await (offset, origin, sender, messageID, serverTime, body) in rows.decode((Int64, String?, String, String, Int64, ByteBuffer).self) {
            entries.append(StoredEntry(
                stream: stream, offset: UInt64(offset), origin: origin, sender: sender, messageID: messageID,
                serverTime: UInt64(serverTime), body: Array(body.readableBytesView)))
        }
        return entries
    }

    public func bounds(of stream: String) async throws -> StreamBounds {
        var last: UInt64 = 0
        for try await value in try await client.query("SELECT last FROM imgw_stream WHERE name = \(stream)", logger: logger).decode(Int64.self) {
            last = UInt64(value)
        }
        var first = last + 1
        let rows = try await client.query("SELECT off FROM imgw_entry WHERE stream = \(stream) ORDER BY off LIMIT 1", logger: logger)
        for try await value in rows.decode(Int64.self) { first = UInt64(value) }
        return StreamBounds(last: last, first: first)
    }

    public func position(user: String, device: String) async throws -> UInt64? {
        var position: UInt64?
        let rows = try await client.query("SELECT off FROM imgw_position WHERE user_id = \(user) AND device = \(device)", logger: logger)
        for try await value in rows.decode(Int64.self) { position = UInt64(value) }
        return position
    }

    public func deleteMessages(acceptedBefore serverTime: UInt64, limit: Int) async throws -> Int {
        guard limit > 0 else { return 0 }
        return try await client.withTransaction(logger: logger) { connection in
            var through: Int64?
            var count = 0
            let rows = try await connection.query("SELECT id, server_time FROM imgw_message ORDER BY id LIMIT \(limit)", logger: logger)
            var done = false
            for try await (id, time) in rows.decode((Int64, Int64).self) {
                if done || UInt64(time) >= serverTime { done = true; continue }
                through = id
                count += 1
            }
            guard let through else { return 0 }
            try await connection.query("DELETE FROM imgw_entry WHERE message <= \(through)", logger: logger)
            try await connection.query("DELETE FROM imgw_message WHERE id <= \(through)", logger: logger)
            return count
        }
    }

    public func size() async throws -> ArchiveSize {
        let rows = try await client.query("""
            SELECT (SELECT count(*) FROM imgw_message), (SELECT count(*) FROM imgw_entry),
              pg_total_relation_size('imgw_message') + pg_total_relation_size('imgw_entry')
              + pg_total_relation_size('imgw_stream') + pg_total_relation_size('imgw_position')
            """, logger: logger)
        for try await (messages, entries, bytes) in rows.decode((Int64, Int64, Int64).self) {
            return ArchiveSize(messages: Int(messages), entries: Int(entries), bytes: Int(bytes))
        }
        return ArchiveSize(messages: 0, entries: 0, bytes: 0)
    }

    public func close() async {
        runner.cancel()
        _ = await runner.value
    }

    /// The server's words for an error, when it said any.
    static func explain(_ error: any Error) -> String {
        if let transaction = error as? PostgresTransactionError {
            if let inner = transaction.closureError ?? transaction.commitError ?? transaction.beginError { return explain(inner) }
        }
        if let error = error as? ArchiveError { return error.message }
        if let psql = error as? PSQLError {
            if let message = psql.serverInfo?[.message] {
                return "PostgreSQL: \(message) (\(psql.serverInfo?[.sqlState] ?? "?"))"
            }
            if let underlying = psql.underlying { return "PostgreSQL \(psql.code): \(underlying)" }
            return "PostgreSQL \(psql.code)"
        }
        return "\(error)"
    }
}

/// `archive.url`: `postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=MODE`.
public struct PostgresURL: Sendable, Hashable {
    public var host: String
    public var port: Int
    public var user: String
    public var password: String?
    public var database: String?
    /// `disable` (the default for a loopback host), `prefer` (the default otherwise) or `require`.
    public var sslMode: String

    /// Parses `url`; ``ArchiveError/Code/misconfigured`` says what is wrong.
    public init(_ url: String) throws(ArchiveError) {
        guard let components = URLComponents(string: url), let scheme = components.scheme,
              ["postgres", "postgresql"].contains(scheme.lowercased())
        else { throw ArchiveError(.misconfigured, "archive.url must be postgres://USER:PASSWORD@HOST:PORT/DATABASE, not \(Self.redact(url))") }
        guard let host = components.host, !host.isEmpty else { throw ArchiveError(.misconfigured, "archive.url names no host") }
        guard let user = components.user, !user.isEmpty else { throw ArchiveError(.misconfigured, "archive.url names no user") }
        self.host = host
        self.port = components.port ?? 5432
        self.user = user.removingPercentEncoding ?? user
        self.password = components.password.map { $0.removingPercentEncoding ?? $0 }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        self.database = path.isEmpty ? nil : path
        let loopback = host == "127.0.0.1" || host == "::1" || host == "localhost"
        let mode = components.queryItems?.first { $0.name == "sslmode" }?.value ?? (loopback ? "disable" : "prefer")
        guard ["disable", "prefer", "require"].contains(mode) else {
            throw ArchiveError(.misconfigured, "archive.url's sslmode must be disable, prefer or require, not \(mode)")
        }
        self.sslMode = mode
    }

    var tls: PostgresClient.Configuration.TLS {
        switch sslMode {
        case "require": .require(.makeClientConfiguration())
        case "prefer": .prefer(.makeClientConfiguration())
        default: .disable
        }
    }

    /// The URL without its password, for logs.
    public var redacted: String { "postgres://\(user)@\(host):\(port)/\(database ?? "")" }

    public static func redact(_ url: String) -> String {
        guard var components = URLComponents(string: url), components.password != nil else { return url }
        components.password = "***"
        return components.string ?? "(unreadable)"
    }
}
