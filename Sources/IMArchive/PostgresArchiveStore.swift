import AsyncToolkit
import Foundation
import Logging
import NIOCore
import PostgresNIO
import Synchronization

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
/// A server that is down or unreachable fails an operation ``ArchiveError/Code/unavailable``
/// within the lease timeout of ``open(url:maxConnections:leaseTimeout:logger:)``, and one
/// that ends the session under it fails it at once (``ConnectionWatches``); the pool
/// connects again by itself once the server is back.
///
/// Tables (``PostgresSchema``), all named `imgw_*` so that they can share a database with the app's:
/// `imgw_message` (each body once), `imgw_entry` (a message at an offset of a stream),
/// `imgw_stream` (each stream's last offset), `imgw_position` (devices' positions),
/// `imgw_conversation` (each user's conversations: newest message, read marker, unread count),
/// `imgw_trimmed` (how far a cap per conversation deleted in each stream),
/// `imgw_group_member` (group memberships), `imgw_meta` (the epoch and the schema's version).
public final class PostgresArchiveStore: ArchiveStore {
    public let epoch: ArchiveEpoch
    private let client: PostgresClient
    private let runner: Task<Void, Never>
    private let logger: Logger
    private let endpoint: String
    private let leaseTimeout: Duration
    private let watches = ConnectionWatches()

    public var description: String { "postgresql \(endpoint)" }

    private init(
        client: PostgresClient, runner: Task<Void, Never>, epoch: ArchiveEpoch, endpoint: String, leaseTimeout: Duration, logger: Logger
    ) {
        self.client = client
        self.runner = runner
        self.epoch = epoch
        self.endpoint = endpoint
        self.leaseTimeout = leaseTimeout
        self.logger = logger
    }

    /// Connects to `url` (`postgres://USER:PASSWORD@HOST:PORT/DATABASE`, with `?sslmode=`
    /// `disable`, `prefer` or `require`), creates the tables if they are missing, and reads
    /// the epoch, on a connection of its own (so that what goes wrong is said at once: the
    /// pool would try a refused connection again and again); then starts the pool of at most
    /// `maxConnections`. Throws ``ArchiveError`` `misconfigured` for a URL that is not one,
    /// or that the server refuses for good (an unknown user or database, a wrong password,
    /// TLS required and not offered); `unavailable`, with a time to retry, when the server
    /// cannot be reached, refuses for now (starting up, too many connections) or does not
    /// answer within 15 s; `corrupt` for tables of a newer imgw.
    ///
    /// Every later operation waits at most `leaseTimeout` for a connection of the pool, then
    /// fails `unavailable` (postgres-nio's pool keeps a request waiting while it cannot
    /// connect, for a minute).
    public static func open(
        url: String, maxConnections: Int = 8, leaseTimeout: Duration = .seconds(3), logger: Logger
    ) async throws(ArchiveError) -> PostgresArchiveStore {
        let settings = try PostgresURL(url)
        let epoch: ArchiveEpoch
        do {
            var configuration = PostgresConnection.Configuration(
                host: settings.host, port: settings.port, username: settings.user, password: settings.password,
                database: settings.database, tls: try settings.connectionTLS())
            configuration.options.connectTimeout = .seconds(5)
            let connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
            let prepared = await MessageArchive.within(.seconds(15)) { try await prepare(connection, logger: logger) }
            try? await connection.close()
            epoch = try prepared.get()
        } catch {
            throw failure(error, "cannot use the archive at \(settings.redacted)")
        }
        var configuration = PostgresClient.Configuration(
            host: settings.host, port: settings.port, username: settings.user, password: settings.password,
            database: settings.database, tls: settings.tls)
        configuration.options.maximumConnections = max(2, maxConnections)
        configuration.options.connectTimeout = .seconds(5)
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        let runner = Task { await client.run() }
        return PostgresArchiveStore(
            client: client, runner: runner, epoch: epoch, endpoint: settings.redacted, leaseTimeout: leaseTimeout, logger: logger)
    }

    /// Brings the tables to ``PostgresSchema/current`` (one gateway at a time: an advisory
    /// lock) and returns the epoch. Tables of a newer imgw, or `imgw_*` tables without a
    /// version, are refused before anything is changed.
    private static func prepare(_ connection: PostgresConnection, logger: Logger) async throws -> ArchiveEpoch {
        try await transaction(on: connection, logger: logger) { connection in
            // 0x696d6777 "imgw": gateways starting together create the tables once.
            try await connection.query("SELECT pg_advisory_xact_lock(1768777591)", logger: logger)
            try await connection.query(PostgresQuery(unsafeSQL: PostgresSchema.meta), logger: logger)
            var values: [String: String] = [:]
            for try await (key, value) in try await connection.query("SELECT key, value FROM imgw_meta", logger: logger).decode((String, String).self) {
                values[key] = value
            }
            var hasTables = false
            for try await exists in try await connection.query("SELECT to_regclass('imgw_message') IS NOT NULL", logger: logger).decode(Bool.self) {
                hasTables = exists
            }
            let steps = try PostgresSchema.steps(recorded: values["schema"], hasTables: hasTables)
            for step in steps {
                for statement in step.statements { try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger) }
            }
            if let last = steps.last {
                let version = String(last.version)
                try await connection.query(
                    "INSERT INTO imgw_meta (key, value) VALUES ('schema', \(version)) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    logger: logger)
                if let from = values["schema"] {
                    logger.notice("archive tables upgraded", metadata: ["from-schema": "\(from)", "to-schema": "\(version)"])
                }
            }
            let fresh = String(ArchiveEpoch.random().rawValue)
            try await connection.query("INSERT INTO imgw_meta (key, value) VALUES ('epoch', \(fresh)) ON CONFLICT (key) DO NOTHING", logger: logger)
            var epochText: String?
            for try await value in try await connection.query("SELECT value FROM imgw_meta WHERE key = 'epoch'", logger: logger).decode(String.self) {
                epochText = value
            }
            guard let epochText, let number = UInt64(epochText), let epoch = ArchiveEpoch(rawValue: number) else {
                throw ArchiveError(.corrupt, "imgw_meta holds no valid epoch: the tables are not an imgw archive")
            }
            return epoch
        }
    }

    // MARK: Connections

    /// What a pooled operation comes to: its value, or the lease's time limit passed first.
    private enum Leg<T: Sendable>: Sendable {
        case done(T)
        case timer
    }

    /// Runs `body` on a connection of the pool. Gives up with `unavailable` when none is had
    /// within ``leaseTimeout`` (a server down or unreachable: the pool keeps the request
    /// waiting while it tries to connect), or when the connection closes under it (see
    /// ``ConnectionWatches``); otherwise it is waited for (a server that stops answering holds
    /// it: ``MessageArchive``'s time limits are what answer then).
    private func pooled<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let client = self.client
        let watches = self.watches
        let limit = leaseTimeout
        // Whether a connection was leased.
        let leased = AsyncCondition(false)
        return try await withThrowingTaskGroup(of: Leg<T>.self) { group in
            group.addTask {
                .done(try await client.withConnection { connection in
                    leased.withLock { $0 = true }
                    return try await watches.run(on: connection) { try await body(connection) }
                })
            }
            group.addTask {
                try? await Task.sleep(for: limit)
                return .timer
            }
            var gaveUp = false
            while true {
                let leg: Leg<T>?
                do {
                    leg = try await group.next()
                } catch {
                    group.cancelAll()
                    // Cancelled while it waited for its lease: the pool's error says only that.
                    if gaveUp, !leased.read({ $0 }) {
                        throw ArchiveError(.unavailable, "no connection to PostgreSQL within \(limit)", retryAfter: 1_000)
                    }
                    throw error
                }
                switch leg {
                case .done(let value)?:
                    group.cancelAll()
                    return value
                case .timer?:
                    // A lease that comes after this is still waited for: what `body` did is
                    // told, not hidden behind a timeout.
                    if !leased.read({ $0 }) {
                        gaveUp = true
                        group.cancelAll()
                    }
                case nil:
                    throw ArchiveError(.unavailable, "no connection to PostgreSQL within \(limit)", retryAfter: 1_000)
                }
            }
        }
    }

    /// BEGIN, `body`, COMMIT, as postgres-nio's `withTransaction`, except after a failure: a
    /// connection the server closed (a fast shutdown ends sessions with FATAL 57P01, a killed
    /// server resets them) is closed and not sent a ROLLBACK. postgres-nio writes its ROLLBACK
    /// whatever happened, and a query written to a connection whose channel has closed is
    /// never answered: the commit under way when the server stopped hung for ever.
    private static func transaction<T: Sendable>(
        on connection: PostgresConnection, logger: Logger, _ body: (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await connection.query("BEGIN", logger: logger)
        do {
            let value = try await body(connection)
            try await connection.query("COMMIT", logger: logger)
            return value
        } catch {
            if connection.isClosed || isConnectionLoss(error) {
                try? await connection.close()
            } else {
                do {
                    try await connection.query("ROLLBACK", logger: logger)
                } catch {
                    // A connection in a state we do not know is not handed out again.
                    try? await connection.close()
                }
            }
            throw error
        }
    }

    /// The connection is gone or going: closed by either side, reset, or ended by the server
    /// (FATAL: an administrator command, a shutdown).
    private static func isConnectionLoss(_ error: any Error) -> Bool {
        guard let psql = error as? PSQLError else { return false }
        if [.serverClosedConnection, .clientClosedConnection, .connectionError, .uncleanShutdown].contains(psql.code) { return true }
        guard let severity = psql.serverInfo?[.severity] else { return false }
        return severity == "FATAL" || severity == "PANIC"
    }

    /// Whether the connections `body`s run on have closed, each watched once (a callback on
    /// its close future: one per operation would pile up on a long-lived connection).
    ///
    /// postgres-nio writes a query to the connection's channel and waits for its answer; a
    /// query written after the channel has closed and dropped its handlers is never answered
    /// nor failed. That happens when the server ends a session between two queries of a
    /// transaction (a fast shutdown's FATAL 57P01 while the client prepares its next
    /// statement), or when the pool hands out a connection that has just closed: the commit
    /// then waited for ever, and with it the archive's writer. A `body` whose connection closes
    /// is given up (it may stay suspended; the transaction it was in is lost with the session).
    ///
    /// Hand-written because postgres-nio tells a connection's end only through its
    /// `closeFuture`, one callback per registration; the outcome itself is settled in an
    /// `AsyncCondition`.
    final class ConnectionWatches: Sendable {
        private struct Watch {
            /// Told when the connection closes: the `body` running on it, if any.
            var waiter: (@Sendable () -> Void)?
        }

        private let watches = Mutex<[PostgresConnection.ID: Watch]>([:])

        /// What a `body` on a connection that closed is told.
        static var lost: ArchiveError { ArchiveError(.unavailable, "the connection to PostgreSQL closed", retryAfter: 1_000) }

        func run<T: Sendable>(on connection: PostgresConnection, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
            guard !connection.isClosed else { throw Self.lost }
            let id = connection.id
            let isNew = watches.withLock { watches in
                guard watches[id] == nil else { return false }
                watches[id] = Watch()
                return true
            }
            // On an already closed connection the callback runs at once.
            if isNew { connection.closeFuture.whenComplete { _ in self.closed(id) } }
            // Settled by whichever comes first: the body, or the connection's close.
            let outcome = AsyncCondition<Result<T, any Error>?>(nil)
            let watched = watches.withLock { watches in
                guard watches[id] != nil else { return false }
                watches[id]?.waiter = { outcome.withLock { $0 = $0 ?? .failure(Self.lost) } }
                return true
            }
            guard watched else { throw Self.lost }
            Task {
                let result: Result<T, any Error>
                do { result = .success(try await body()) } catch { result = .failure(error) }
                watches.withLock { $0[id]?.waiter = nil }
                outcome.withLock { $0 = $0 ?? result }
            }
            // Not cancellable: the body's outcome is what the caller is told (a commit that
            // went through is not reported as failed).
            return try await outcome.waitIgnoringCancellation { $0 }.get()
        }

        private func closed(_ id: PostgresConnection.ID) {
            watches.withLock { $0.removeValue(forKey: id) }?.waiter?()
        }
    }

    // MARK: Commit

    public func commit(_ messages: [ArchiveMessage], positions: [DevicePosition]) async throws -> [AppendOutcome] {
        let logger = self.logger
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await pooled { connection in
                    try await Self.transaction(on: connection, logger: logger) { connection in
                        try await Self.commit(messages, positions: positions, on: connection, logger: logger)
                    }
                }
            } catch let error as PSQLError where attempt < 4 && Self.isRetriable(error) {
                logger.debug("archive commit retried", metadata: ["error": "\(Self.explain(error))", "attempt": "\(attempt)"])
            } catch {
                throw Self.failure(error, "the archive could not commit")
            }
        }
    }

    /// A deadlock or a serialization failure: the transaction can simply run again.
    private static func isRetriable(_ error: PSQLError) -> Bool {
        guard let state = error.serverInfo?[.sqlState] else { return false }
        return state == "40P01" || state == "40001"
    }

    private static func commit(
        _ messages: [ArchiveMessage], positions: [DevicePosition], on connection: PostgresConnection, logger: Logger
    ) async throws -> [AppendOutcome] {
        var outcomes = [AppendOutcome?](repeating: nil, count: messages.count)
        struct Key: Hashable { var sender: String; var id: String }
        /// A row of imgw_message.
        struct Row { var id: Int64; var fingerprint: Int64; var serverTime: Int64 }
        /// What the table holds under the batch's keys: before, or now.
        var stored: [Key: Row] = [:]
        func key(_ index: Int) -> Key { Key(sender: messages[index].sender, id: messages[index].messageID) }
        func lookUp(_ indexes: [Int]) async throws {
            let rows = try await connection.query("""
                SELECT m.id, m.sender, m.message_id, m.fingerprint, m.server_time FROM imgw_message m
                JOIN unnest(\(indexes.map { messages[$0].sender })::text[], \(indexes.map { messages[$0].messageID })::text[])
                  AS k(sender, message_id) ON m.sender = k.sender AND m.message_id = k.message_id
                """, logger: logger)
            for try await (id, sender, messageID, fingerprint, serverTime) in rows.decode((Int64, String, String, Int64, Int64).self) {
                stored[Key(sender: sender, id: messageID)] = Row(id: id, fingerprint: fingerprint, serverTime: serverTime)
            }
        }
        // 1. Messages stored before (resends, reused ids). The first of each new key is
        // stored; the others (repeats within the batch) are told what became of it.
        if !messages.isEmpty { try await lookUp(Array(messages.indices)) }
        var fresh: [Int] = []
        var repeats: [Int] = []
        var seen: Set<Key> = []
        for index in messages.indices {
            let key = key(index)
            if stored[key] == nil, seen.insert(key).inserted { fresh.append(index) } else { repeats.append(index) }
        }
        // 2. The new messages' bodies. A key another gateway stored a moment ago (its insert
        // won: ours waited for its commit) is not inserted, and is told as a repeat.
        if !fresh.isEmpty {
            let rows = try await connection.query("""
                INSERT INTO imgw_message (sender, message_id, fingerprint, server_time, body)
                SELECT * FROM unnest(\(fresh.map { messages[$0].sender })::text[], \(fresh.map { messages[$0].messageID })::text[],
                  \(fresh.map { Int64(bitPattern: messages[$0].fingerprint) })::int8[],
                  \(fresh.map { Int64(clamping: messages[$0].serverTime) })::int8[],
                  \(fresh.map { ByteBuffer(bytes: messages[$0].body) })::bytea[])
                ON CONFLICT (sender, message_id) DO NOTHING
                RETURNING id, sender, message_id, fingerprint, server_time
                """, logger: logger)
            var inserted: Set<Key> = []
            for try await (id, sender, messageID, fingerprint, serverTime) in rows.decode((Int64, String, String, Int64, Int64).self) {
                let key = Key(sender: sender, id: messageID)
                stored[key] = Row(id: id, fingerprint: fingerprint, serverTime: serverTime)
                inserted.insert(key)
            }
            let raced = fresh.filter { !inserted.contains(key($0)) }
            if !raced.isEmpty {
                fresh.removeAll { !inserted.contains(key($0)) }
                try await lookUp(raced)
                repeats += raced
            }
        }
        // 3. Offsets: each stream's counter moved on by its copies, streams in name order
        // (the rows are locked in that order: two commits cannot deadlock over them).
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
        var streams: [String] = [], offsets: [Int64] = [], ids: [Int64] = [], origins: [String] = [], conversations: [String] = []
        var placed: [(copy: ArchiveMessage.Copy, offset: UInt64, serverTime: UInt64)] = []
        for index in fresh {
            let message = messages[index]
            let id = stored[key(index)]!.id
            var given: [UInt64] = []
            for copy in message.copies {
                let offset = next[copy.stream]!
                next[copy.stream] = offset + 1
                streams.append(copy.stream)
                offsets.append(offset)
                ids.append(id)
                origins.append(copy.origin ?? "")
                conversations.append(copy.conversation?.key ?? "")
                given.append(UInt64(offset))
                if copy.conversation != nil { placed.append((copy, UInt64(offset), message.serverTime)) }
            }
            outcomes[index] = .stored(given)
        }
        if !streams.isEmpty {
            try await connection.query("""
                INSERT INTO imgw_entry (stream, off, message, origin, conversation)
                SELECT s, o, m, NULLIF(g, ''), NULLIF(c, '') FROM unnest(\(streams)::text[], \(offsets)::int8[], \(ids)::int8[],
                  \(origins)::text[], \(conversations)::text[]) AS e(s, o, m, g, c)
                """, logger: logger)
        }
        // The conversation lists: one row per (user, conversation), in key order (the
        // streams' rows, locked above, already keep two commits to one user apart).
        let updates = ConversationUpdate.gather(placed)
        if !updates.isEmpty {
            try await connection.query("""
                INSERT INTO imgw_conversation AS c (user_id, peer, last_off, last_time, read_through, unread)
                SELECT * FROM unnest(\(updates.map(\.user))::text[], \(updates.map(\.key))::text[],
                  \(updates.map { Int64(clamping: $0.lastOffset) })::int8[], \(updates.map { Int64(clamping: $0.lastTime) })::int8[],
                  \(updates.map { Int64(clamping: $0.sentThrough) })::int8[], \(updates.map { Int32(clamping: $0.received) })::int4[])
                ON CONFLICT (user_id, peer) DO UPDATE SET last_off = EXCLUDED.last_off, last_time = EXCLUDED.last_time,
                  read_through = GREATEST(c.read_through, EXCLUDED.read_through),
                  unread = CASE WHEN EXCLUDED.read_through > 0 THEN EXCLUDED.unread ELSE c.unread + EXCLUDED.unread END
                """, logger: logger)
        }
        // 5. Resends, reused ids and repeats: told against what is stored under their key (a
        // duplicate with where its copies are, the copies just made for a repeat of a new one).
        var duplicateOf: [Int: Row] = [:]
        for index in repeats {
            guard let row = stored[key(index)] else {
                let message = messages[index]
                throw ArchiveError(.unavailable, "message \(message.messageID) of \(message.sender) vanished while it was stored", retryAfter: 100)
            }
            if row.fingerprint == Int64(bitPattern: messages[index].fingerprint) {
                duplicateOf[index] = row
            } else {
                outcomes[index] = .reused
            }
        }
        if !duplicateOf.isEmpty {
            var copies: [Int64: [StoredCopy]] = [:]
            let rows = try await connection.query(
                "SELECT message, stream, off, origin FROM imgw_entry WHERE message = ANY(\(Array(Set(duplicateOf.values.map(\.id))))::int8[]) ORDER BY message, stream, off",
                logger: logger)
            for try await (message, stream, offset, origin) in rows.decode((Int64, String, Int64, String?).self) {
                copies[message, default: []].append(StoredCopy(stream: stream, offset: UInt64(offset), origin: origin))
            }
            for (index, row) in duplicateOf {
                outcomes[index] = .duplicate(copies[row.id] ?? [], serverTime: UInt64(row.serverTime))
            }
        }
        // 6. Positions, in key order.
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
        let logger = self.logger
        do {
            return try await pooled { connection in
                let rows = try await connection.query("""
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
        } catch {
            throw Self.failure(error, "the archive could not read \(stream)")
        }
    }

    public func history(stream: String, conversation: Conversation, position: HistoryPosition, limit: Int) async throws -> HistoryPage {
        guard limit > 0 else { return HistoryPage(entries: [], complete: false) }
        let logger = self.logger
        let key = conversation.key
        do {
            return try await pooled { connection in
                // One more than asked: whether it exists says whether the page is the last.
                let rows: PostgresRowSequence
                var descending = true
                switch position {
                case .latest:
                    rows = try await connection.query("""
                        SELECT e.off, e.origin, m.sender, m.message_id, m.server_time, m.body
                        FROM imgw_entry e JOIN imgw_message m ON m.id = e.message
                        WHERE e.stream = \(stream) AND e.conversation = \(key) AND e.kind IS NULL ORDER BY e.off DESC LIMIT \(limit + 1)
                        """, logger: logger)
                case .before(let offset):
                    rows = try await connection.query("""
                        SELECT e.off, e.origin, m.sender, m.message_id, m.server_time, m.body
                        FROM imgw_entry e JOIN imgw_message m ON m.id = e.message
                        WHERE e.stream = \(stream) AND e.conversation = \(key) AND e.kind IS NULL AND e.off < \(Int64(clamping: offset))
                        ORDER BY e.off DESC LIMIT \(limit + 1)
                        """, logger: logger)
                case .after(let offset):
                    descending = false
                    rows = try await connection.query("""
                        SELECT e.off, e.origin, m.sender, m.message_id, m.server_time, m.body
                        FROM imgw_entry e JOIN imgw_message m ON m.id = e.message
                        WHERE e.stream = \(stream) AND e.conversation = \(key) AND e.kind IS NULL AND e.off > \(Int64(clamping: offset))
                        ORDER BY e.off ASC LIMIT \(limit + 1)
                        """, logger: logger)
                }
                var entries: [StoredEntry] = []
                for try await (offset, origin, sender, messageID, serverTime, body) in rows.decode((Int64, String?, String, String, Int64, ByteBuffer).self) {
                    entries.append(StoredEntry(
                        stream: stream, offset: UInt64(offset), origin: origin, sender: sender, messageID: messageID,
                        serverTime: UInt64(serverTime), body: Array(body.readableBytesView), conversation: conversation))
                }
                let complete = entries.count <= limit
                entries = Array(entries.prefix(limit))
                if descending { entries.reverse() }
                return HistoryPage(entries: entries, complete: complete)
            }
        } catch {
            throw Self.failure(error, "the archive could not read the history of \(conversation) for \(stream)")
        }
    }

    public func conversations(user: String, before: UInt64?, limit: Int) async throws -> ConversationPage {
        guard limit > 0 else { return ConversationPage(conversations: [], complete: false) }
        let logger = self.logger
        let bound = before.map { Int64(clamping: $0) } ?? Int64.max
        do {
            return try await pooled { connection in
                let rows = try await connection.query("""
                    SELECT c.peer, c.last_off, c.last_time, c.read_through, c.unread,
                      e.origin, m.sender, m.message_id, m.server_time, m.body
                    FROM imgw_conversation c
                    LEFT JOIN imgw_entry e ON e.stream = c.user_id AND e.off = c.last_off
                    LEFT JOIN imgw_message m ON m.id = e.message
                    WHERE c.user_id = \(user) AND c.last_off < \(bound) ORDER BY c.last_off DESC LIMIT \(limit + 1)
                    """, logger: logger)
                var lines: [ConversationSummary] = []
                for try await (peer, lastOffset, lastTime, readThrough, unread, origin, sender, messageID, serverTime, body)
                    in rows.decode((String, Int64, Int64, Int64, Int32, String?, String?, String?, Int64?, ByteBuffer?).self)
                {
                    guard let conversation = Conversation(key: peer) else { continue }
                    var last: StoredEntry?
                    if let sender, let messageID, let serverTime, let body {
                        last = StoredEntry(
                            stream: user, offset: UInt64(lastOffset), origin: origin, sender: sender, messageID: messageID,
                            serverTime: UInt64(serverTime), body: Array(body.readableBytesView), conversation: conversation)
                    }
                    lines.append(ConversationSummary(
                        conversation: conversation, lastOffset: UInt64(lastOffset), lastTime: UInt64(lastTime), last: last,
                        readThrough: UInt64(readThrough), unread: Int(unread)))
                }
                let complete = lines.count <= limit
                return ConversationPage(conversations: Array(lines.prefix(limit)), complete: complete)
            }
        } catch {
            throw Self.failure(error, "the archive could not read the conversations of \(user)")
        }
    }

    public func markRead(user: String, conversation: Conversation, through: UInt64) async throws -> ReadMarkOutcome {
        let logger = self.logger
        let key = conversation.key
        do {
            return try await pooled { connection in
                try await Self.transaction(on: connection, logger: logger) { connection in
                    var found: (last: Int64, read: Int64, unread: Int32)?
                    let rows = try await connection.query("""
                        SELECT last_off, read_through, unread FROM imgw_conversation WHERE user_id = \(user) AND peer = \(key) FOR UPDATE
                        """, logger: logger)
                    for try await row in rows.decode((Int64, Int64, Int32).self) { found = row }
                    guard let found else { return .unknownConversation }
                    guard through <= UInt64(found.last) else { return .pastEnd(last: UInt64(found.last)) }
                    guard through > UInt64(found.read) else {
                        return .marked(ReadMarker(conversation: conversation, readThrough: UInt64(found.read), unread: Int(found.unread)))
                    }
                    let marker = Int64(clamping: through)
                    var unread = 0
                    let counted = try await connection.query("""
                        UPDATE imgw_conversation SET read_through = \(marker), unread = (
                          SELECT count(*) FROM imgw_entry WHERE stream = \(user) AND conversation = \(key) AND off > \(marker) AND origin IS NULL AND kind IS NULL)
                        WHERE user_id = \(user) AND peer = \(key) RETURNING unread
                        """, logger: logger)
                    for try await value in counted.decode(Int32.self) { unread = Int(value) }
                    return .marked(ReadMarker(conversation: conversation, readThrough: through, unread: unread))
                }
            }
        } catch {
            throw Self.failure(error, "the archive could not mark \(conversation) read for \(user)")
        }
    }

    public func deleteMessage(sender: String, messageID: String, at time: UInt64, origin: String?, tombstone: @escaping @Sendable (_ body: [UInt8]) -> [UInt8]) async throws -> DeletedMessage? {
        let logger = self.logger
        do {
            return try await pooled { connection in
                try await Self.transaction(on: connection, logger: logger) { connection in
                    var found: (id: Int64, deleted: Int64?, body: ByteBuffer)?
                    let rows = try await connection.query(
                        "SELECT id, deleted, body FROM imgw_message WHERE sender = \(sender) AND message_id = \(messageID) FOR UPDATE", logger: logger)
                    for try await row in rows.decode((Int64, Int64?, ByteBuffer).self) { found = row }
                    guard let found else { return nil }
                    if let deleted = found.deleted {
                        var copies: [StoredCopy] = []
                        let made = try await connection.query(
                            "SELECT stream, off, origin FROM imgw_entry WHERE message = \(found.id) AND kind = 'deleted' ORDER BY stream", logger: logger)
                        for try await (stream, offset, origin) in made.decode((String, Int64, String?).self) {
                            copies.append(StoredCopy(stream: stream, offset: UInt64(offset), origin: origin))
                        }
                        return DeletedMessage(tombstones: copies, deletedAt: UInt64(deleted), first: false, body: Array(found.body.readableBytesView))
                    }
                    let replaced = tombstone(Array(found.body.readableBytesView))
                    try await connection.query(
                        "UPDATE imgw_message SET body = \(ByteBuffer(bytes: replaced)), deleted = \(Int64(clamping: time)) WHERE id = \(found.id)",
                        logger: logger)
                    var originals: [(stream: String, origin: String?, conversation: String?)] = []
                    let copies = try await connection.query(
                        "SELECT stream, origin, conversation FROM imgw_entry WHERE message = \(found.id) AND kind IS NULL ORDER BY stream", logger: logger)
                    for try await row in copies.decode((String, String?, String?).self) { originals.append(row) }
                    guard !originals.isEmpty else { return DeletedMessage(tombstones: [], deletedAt: time, first: true, body: replaced) }
                    // The streams' counters, locked in name order as a commit locks them.
                    let names = originals.map(\.stream)
                    var last: [String: Int64] = [:]
                    try await connection.query("SELECT name FROM imgw_stream WHERE name = ANY(\(names)::text[]) ORDER BY name FOR UPDATE", logger: logger)
                    let moved = try await connection.query("""
                        UPDATE imgw_stream SET last = last + 1 WHERE name = ANY(\(names)::text[]) RETURNING name, last
                        """, logger: logger)
                    for try await (name, value) in moved.decode((String, Int64).self) { last[name] = value }
                    var tombstones: [StoredCopy] = []
                    for original in originals {
                        guard let offset = last[original.stream] else { continue }
                        let copyOrigin: String? = original.origin == nil ? nil : (origin ?? "")
                        try await connection.query("""
                            INSERT INTO imgw_entry (stream, off, message, origin, conversation, kind)
                            VALUES (\(original.stream), \(offset), \(found.id), \(copyOrigin), \(original.conversation), 'deleted')
                            """, logger: logger)
                        tombstones.append(StoredCopy(stream: original.stream, offset: UInt64(offset), origin: copyOrigin))
                    }
                    return DeletedMessage(tombstones: tombstones, deletedAt: time, first: true, body: replaced)
                }
            }
        } catch {
            throw Self.failure(error, "the archive could not delete message \(messageID) of \(sender)")
        }
    }

    public func eraseUser(_ user: String, at time: UInt64, tombstone: @escaping @Sendable (_ body: [UInt8]) -> [UInt8]) async throws -> UserErasure {
        let logger = self.logger
        do {
            return try await pooled { connection in
                try await Self.transaction(on: connection, logger: logger) { connection in
                    var messages = 0
                    var after: Int64 = 0
                    while true {
                        var rows: [(Int64, ByteBuffer)] = []
                        let found = try await connection.query("""
                            SELECT id, body FROM imgw_message WHERE sender = \(user) AND deleted IS NULL AND id > \(after) ORDER BY id LIMIT 500 FOR UPDATE
                            """, logger: logger)
                        for try await row in found.decode((Int64, ByteBuffer).self) { rows.append(row) }
                        guard let last = rows.last else { break }
                        let ids = rows.map(\.0)
                        let bodies = rows.map { ByteBuffer(bytes: tombstone(Array($0.1.readableBytesView))) }
                        try await connection.query("""
                            UPDATE imgw_message m SET body = u.body, deleted = \(Int64(clamping: time))
                            FROM unnest(\(ids)::int8[], \(bodies)::bytea[]) AS u(id, body) WHERE m.id = u.id
                            """, logger: logger)
                        messages += rows.count
                        after = last.0
                    }
                    var entries = 0
                    let removed = try await connection.query(
                        "WITH gone AS (DELETE FROM imgw_entry WHERE stream = \(user) RETURNING 1) SELECT count(*) FROM gone", logger: logger)
                    for try await count in removed.decode(Int64.self) { entries = Int(count) }
                    try await connection.query("DELETE FROM imgw_conversation WHERE user_id = \(user)", logger: logger)
                    try await connection.query("DELETE FROM imgw_position WHERE user_id = \(user)", logger: logger)
                    return UserErasure(messages: messages, entries: entries)
                }
            }
        } catch {
            throw Self.failure(error, "the archive could not erase \(user)")
        }
    }

    public func bounds(of stream: String) async throws -> StreamBounds {
        let logger = self.logger
        do {
            return try await pooled { connection in
                // One statement: both from one snapshot.
                let rows = try await connection.query("""
                    SELECT (SELECT last FROM imgw_stream WHERE name = \(stream)), (SELECT min(off) FROM imgw_entry WHERE stream = \(stream)),
                      (SELECT through FROM imgw_trimmed WHERE stream = \(stream))
                    """, logger: logger)
                var bounds = StreamBounds.empty
                for try await (last, first, trimmed) in rows.decode((Int64?, Int64?, Int64?).self) {
                    let last = UInt64(last ?? 0)
                    bounds = StreamBounds(last: last, first: first.map { UInt64($0) } ?? last + 1, trimmedThrough: UInt64(trimmed ?? 0))
                }
                return bounds
            }
        } catch {
            throw Self.failure(error, "the archive could not read the bounds of \(stream)")
        }
    }

    public func position(user: String, device: String) async throws -> UInt64? {
        let logger = self.logger
        do {
            return try await pooled { connection in
                var position: UInt64?
                let rows = try await connection.query("SELECT off FROM imgw_position WHERE user_id = \(user) AND device = \(device)", logger: logger)
                for try await value in rows.decode(Int64.self) { position = UInt64(value) }
                return position
            }
        } catch {
            throw Self.failure(error, "the archive could not read the position of \(user)/\(device)")
        }
    }

    public func groupMembers(_ group: String) async throws -> [String: UInt64]? {
        let logger = self.logger
        do {
            return try await pooled { connection in
                var known = false
                var members: [String: UInt64] = [:]
                let rows = try await connection.query("SELECT user_id, since FROM imgw_group_member WHERE grp = \(group)", logger: logger)
                for try await (user, since) in rows.decode((String, Int64?).self) {
                    known = true
                    if let since { members[user] = UInt64(since) }
                }
                return known ? members : nil
            }
        } catch {
            throw Self.failure(error, "the archive could not read the members of group \(group)")
        }
    }

    public func recordGroupMembers(_ group: String, _ changes: [String: UInt64?]) async throws {
        guard !changes.isEmpty else { return }
        let logger = self.logger
        do {
            try await pooled { connection in
                try await Self.transaction(on: connection, logger: logger) { connection in
                    for (user, since) in changes.sorted(by: { $0.key < $1.key }) {
                        let value = since.map { Int64(clamping: $0) }
                        try await connection.query(
                            """
                            INSERT INTO imgw_group_member (grp, user_id, since) VALUES (\(group), \(user), \(value))
                            ON CONFLICT (grp, user_id) DO UPDATE SET since = EXCLUDED.since
                            """, logger: logger)
                    }
                }
            }
        } catch {
            throw Self.failure(error, "the archive could not record the members of group \(group)")
        }
    }

    public func deleteMessages(acceptedBefore serverTime: UInt64, limit: Int) async throws -> Int {
        guard limit > 0 else { return 0 }
        let logger = self.logger
        do {
            return try await pooled { connection in
                try await Self.transaction(on: connection, logger: logger) { connection in
                    // The oldest messages, by id (which grows with time), up to the first that
                    // is not old enough; exactly those are deleted (a message with a smaller id
                    // committed meanwhile is not).
                    var old: [Int64] = []
                    var done = false
                    let rows = try await connection.query("SELECT id, server_time FROM imgw_message ORDER BY id LIMIT \(limit)", logger: logger)
                    for try await (id, time) in rows.decode((Int64, Int64).self) {
                        if done || UInt64(time) >= serverTime { done = true; continue }
                        old.append(id)
                    }
                    guard !old.isEmpty else { return 0 }
                    try await connection.query("DELETE FROM imgw_entry WHERE message = ANY(\(old)::int8[])", logger: logger)
                    try await connection.query("DELETE FROM imgw_message WHERE id = ANY(\(old)::int8[])", logger: logger)
                    return old.count
                }
            }
        } catch {
            throw Self.failure(error, "the archive could not delete old messages")
        }
    }

    public func trimConversation(stream: String, conversation: Conversation, keep: Int, limit: Int) async throws -> Int {
        guard limit > 0 else { return 0 }
        let logger = self.logger
        let key = conversation.key
        do {
            return try await pooled { connection in
                try await Self.transaction(on: connection, logger: logger) { connection in
                    // The newest entry beyond the cap: it and what is older in the
                    // conversation go, the oldest first, `limit` at most.
                    var cut: Int64?
                    let newest = try await connection.query("""
                        SELECT off FROM imgw_entry WHERE stream = \(stream) AND conversation = \(key) AND kind IS NULL
                        ORDER BY off DESC LIMIT 1 OFFSET \(max(0, keep))
                        """, logger: logger)
                    for try await off in newest.decode(Int64.self) { cut = off }
                    guard let cut else { return 0 }
                    var offsets: [Int64] = []
                    var messages = Set<Int64>()
                    let deleted = try await connection.query("""
                        DELETE FROM imgw_entry WHERE stream = \(stream) AND off IN (
                          SELECT off FROM imgw_entry WHERE stream = \(stream) AND conversation = \(key) AND off <= \(cut) ORDER BY off LIMIT \(limit))
                        RETURNING off, message
                        """, logger: logger)
                    for try await (off, message) in deleted.decode((Int64, Int64).self) {
                        offsets.append(off)
                        messages.insert(message)
                    }
                    guard let through = offsets.max() else { return 0 }
                    let ids = Array(messages)
                    try await connection.query("""
                        DELETE FROM imgw_message m WHERE m.id = ANY(\(ids)::int8[]) AND NOT EXISTS (SELECT 1 FROM imgw_entry e WHERE e.message = m.id)
                        """, logger: logger)
                    try await connection.query("""
                        INSERT INTO imgw_trimmed (stream, through) VALUES (\(stream), \(through))
                        ON CONFLICT (stream) DO UPDATE SET through = GREATEST(imgw_trimmed.through, excluded.through)
                        """, logger: logger)
                    try await connection.query("""
                        UPDATE imgw_conversation c SET unread = (
                          SELECT count(*) FROM imgw_entry e WHERE e.stream = c.user_id AND e.conversation = c.peer
                          AND e.off > c.read_through AND e.origin IS NULL AND e.kind IS NULL)
                        WHERE c.user_id = \(stream) AND c.peer = \(key)
                        """, logger: logger)
                    return offsets.count
                }
            }
        } catch {
            throw Self.failure(error, "the archive could not trim \(conversation) of \(stream)")
        }
    }

    public func size() async throws -> ArchiveSize {
        let logger = self.logger
        do {
            return try await pooled { connection in
                let rows = try await connection.query("""
                    SELECT (SELECT count(*) FROM imgw_message), (SELECT count(*) FROM imgw_entry),
                      pg_total_relation_size('imgw_message') + pg_total_relation_size('imgw_entry')
                      + pg_total_relation_size('imgw_stream') + pg_total_relation_size('imgw_position')
                      + pg_total_relation_size('imgw_conversation') + pg_total_relation_size('imgw_trimmed')
                    """, logger: logger)
                for try await (messages, entries, bytes) in rows.decode((Int64, Int64, Int64).self) {
                    return ArchiveSize(messages: Int(messages), entries: Int(entries), bytes: Int(bytes))
                }
                return ArchiveSize(messages: 0, entries: 0, bytes: 0)
            }
        } catch {
            throw Self.failure(error, "the archive could not measure its size")
        }
    }

    public func close() async {
        runner.cancel()
        _ = await runner.value
    }

    // MARK: Errors

    /// `error` as an ``ArchiveError``: `misconfigured` when the server refuses the URL's user,
    /// password or database (trying again cannot help), `unavailable` with a time to retry
    /// otherwise; an ``ArchiveError`` is passed on as it is.
    static func failure(_ error: any Error, _ doing: String) -> ArchiveError {
        if let error = error as? ArchiveError { return error }
        if isRefusal(error) { return ArchiveError(.misconfigured, "\(doing): \(explain(error))") }
        return ArchiveError(.unavailable, "\(doing): \(explain(error))", retryAfter: 1_000)
    }

    /// The server refused the user (SQLSTATE class 28: no such role, a wrong password, not
    /// allowed by pg_hba.conf) or the database (3D000), or TLS that the URL requires.
    private static func isRefusal(_ error: any Error) -> Bool {
        guard let psql = error as? PSQLError else { return false }
        if let state = psql.serverInfo?[.sqlState] { return state.hasPrefix("28") || state == "3D000" }
        return psql.code == .sslUnsupported || psql.code == .unsupportedAuthMechanism || psql.code == .authMechanismRequiresPassword
    }

    /// The server's words for an error, when it said any. (PSQLError's own description is a
    /// placeholder that says nothing.)
    static func explain(_ error: any Error) -> String {
        if let error = error as? ArchiveError { return error.message }
        if let psql = error as? PSQLError {
            if let message = psql.serverInfo?[.message] {
                return "PostgreSQL: \(message) (\(psql.serverInfo?[.sqlState] ?? "?"))"
            }
            if let underlying = psql.underlying { return "PostgreSQL \(psql.code): \(explain(underlying))" }
            return "PostgreSQL \(psql.code)"
        }
        if String(reflecting: type(of: error)).hasSuffix("ConnectionPoolError") {
            // postgres-nio's pool, after a minute without a connection: it fails requests at
            // once (and keeps trying to connect).
            return "PostgreSQL cannot be reached (\(error))"
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

    /// The same for a single connection (``PostgresArchiveStore/open(url:maxConnections:leaseTimeout:logger:)``'s first).
    func connectionTLS() throws -> PostgresConnection.Configuration.TLS {
        switch sslMode {
        case "require": .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
        case "prefer": .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
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
