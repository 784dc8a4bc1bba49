import Foundation
@testable import IMArchive
import Logging
import Synchronization
import Testing
import IMTestSupport

/// ``PostgresArchiveStore`` (and ``MessageArchive`` over it) against a real PostgreSQL server
/// of the test's own (``TestPostgres``): what the SQLite store's unit tests check, the
/// commit order of offsets with two gateways writing one stream at once, and the server
/// killed, stopped or frozen under appends.
@Suite("PostgreSQL archive", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct PostgresArchiveTests {
    static let logger: Logger = {
        var logger = Logger(label: "pg-archive-test")
        logger.logLevel = ProcessInfo.processInfo.environment["PG_TEST_LOG"].flatMap { Logger.Level(rawValue: $0) } ?? .notice
        return logger
    }()

    static func open(_ postgres: TestPostgres, url: String? = nil) async throws -> PostgresArchiveStore {
        try await PostgresArchiveStore.open(url: url ?? postgres.url, logger: logger)
    }

    // MARK: The store

    @Test("offsets count 1, 2, 3 per stream across commits, the sender's copy in its own stream")
    func offsets() async throws {
        let postgres = try await TestPostgres.start()
        let store = try await Self.open(postgres)
        let first = try await store.commit([pgChat("alice", "m-1", to: ["bob"]), pgChat("carol", "m-1", to: ["bob"], device: nil)], positions: [])
        #expect(first == [.stored([1, 1]), .stored([2])])
        let second = try await store.commit([pgChat("alice", "m-2", to: ["bob", "dave"])], positions: [])
        #expect(second == [.stored([3, 1, 2])])
        let bob = try await store.read(stream: "bob", after: 0, through: .max, limit: 10)
        #expect(bob.map(\.offset) == [1, 2, 3])
        #expect(bob.map(\.sender) == ["alice", "carol", "alice"])
        #expect(bob.map(\.messageID) == ["m-1", "m-1", "m-2"])
        #expect(bob.allSatisfy { $0.origin == nil && $0.stream == "bob" })
        #expect(bob.map(\.serverTime) == [1_000, 1_000, 1_000])
        let alice = try await store.read(stream: "alice", after: 0, through: .max, limit: 10)
        #expect(alice.map(\.offset) == [1, 2])
        #expect(alice.map(\.origin) == ["phone", "phone"])
        #expect(alice.first?.body == Array("{\"text\":\"hi\"}".utf8))
        #expect(try await store.read(stream: "bob", after: 1, through: 2, limit: 10).map(\.offset) == [2])
        #expect(try await store.read(stream: "bob", after: 0, through: .max, limit: 2).map(\.offset) == [1, 2])
        #expect(try await store.read(stream: "bob", after: 3, through: .max, limit: 10).isEmpty)
        #expect(try await store.bounds(of: "bob") == StreamBounds(last: 3, first: 1))
        #expect(try await store.bounds(of: "dave") == StreamBounds(last: 1, first: 1))
        #expect(try await store.bounds(of: "nobody") == .empty)
        // A body of every byte value comes back as it went in (bytea, not text).
        var binary = pgChat("erin", "m-1", to: ["frank"])
        binary.body = (0...255).map { UInt8($0) } + [0, 0]
        #expect(try await store.commit([binary], positions: []) == [.stored([1, 1])])
        #expect(try await store.read(stream: "frank", after: 0, through: .max, limit: 1).first?.body == binary.body)
        await store.close()
    }

    @Test("a message stored again is a duplicate with its first copies and server time, another with the same id is reused, also within one batch")
    func duplicates() async throws {
        let postgres = try await TestPostgres.start()
        let store = try await Self.open(postgres)
        let message = pgChat("alice", "m-1", to: ["bob"], at: 77)
        _ = try await store.commit([message], positions: [])
        var later = message
        later.serverTime = 99
        let outcomes = try await store.commit([
            later, pgChat("alice", "m-1", to: ["bob"], text: "other"),
            pgChat("alice", "m-2", to: ["bob"]), pgChat("alice", "m-2", to: ["bob"], at: 5_000),
            pgChat("alice", "m-3", to: ["bob"]), pgChat("alice", "m-3", to: ["bob"], text: "other"),
        ], positions: [])
        guard outcomes.count == 6, case .duplicate(let first, 77) = outcomes[0] else {
            Issue.record("expected a duplicate with the first server time, got \(outcomes)")
            return
        }
        #expect(Set(first) == [StoredCopy(stream: "bob", offset: 1), StoredCopy(stream: "alice", offset: 1, origin: "phone")])
        #expect(outcomes[1] == .reused)
        #expect(outcomes[2] == .stored([2, 2]))
        guard case .duplicate(let copies, 1_000) = outcomes[3] else {
            Issue.record("a repeat within the batch: expected a duplicate of the first, got \(outcomes[3])")
            return
        }
        #expect(Set(copies) == [StoredCopy(stream: "bob", offset: 2), StoredCopy(stream: "alice", offset: 2, origin: "phone")])
        #expect(outcomes[4] == .stored([3, 3]))
        #expect(outcomes[5] == .reused, "the same id for another message within the batch")
        #expect(outcomes[0].offset(in: "bob", of: message) == 1)
        #expect(try await store.bounds(of: "bob").last == 3, "nothing was added for the duplicates and the reuses")
        #expect(try await store.read(stream: "bob", after: 0, through: .max, limit: 10).map(\.messageID) == ["m-1", "m-2", "m-3"])
        await store.close()
    }

    @Test("a resend another gateway is committing is waited for, then told a duplicate (or a reuse), and not stored twice")
    func resendRace() async throws {
        let postgres = try await TestPostgres.start()
        let store = try await Self.open(postgres)
        let same = pgChat("alice", "r-1", to: ["bob"], at: 42)
        let other = pgChat("alice", "r-2", to: ["bob"])
        // The other gateway: a transaction that has inserted both messages (r-2 with another
        // fingerprint) and takes 2 s to commit.
        let insert = """
            INSERT INTO imgw_message (sender, message_id, fingerprint, server_time, body) VALUES
              ('alice', 'r-1', \(Int64(bitPattern: same.fingerprint)), 42, '\\x00'),
              ('alice', 'r-2', \(Int64(bitPattern: other.fingerprint) ^ 1), 43, '\\x00')
            """
        let slow = Task {
            try await postgres.client("psql", postgres.psqlArguments + ["-c", "BEGIN", "-c", insert, "-c", "SELECT pg_sleep(2)", "-c", "COMMIT"])
        }
        // Once it sleeps (its rows are inserted, not committed), our commit starts: it waits
        // on the unique key until the other commits.
        let deadline = ContinuousClock.now + .seconds(30)
        while try await postgres.client("psql", postgres.psqlArguments + ["-tAc", "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(2)'"]) != "1" {
            guard ContinuousClock.now < deadline else { throw TestError("the other transaction never got to its sleep") }
            try await Task.sleep(for: .milliseconds(20))
        }
        let started = ContinuousClock.now
        let outcomes = try await store.commit([same, other, pgChat("alice", "r-3", to: ["bob"])], positions: [])
        #expect(ContinuousClock.now - started > .milliseconds(500), "the commit waited for the other transaction")
        _ = try await slow.value
        #expect(outcomes == [.duplicate([], serverTime: 42), .reused, .stored([1, 1])], "the other's rows have no entries")
        #expect(try await store.bounds(of: "bob") == StreamBounds(last: 1, first: 1))
        await store.close()
    }

    @Test("positions: saved with a commit, never moved back")
    func positions() async throws {
        let postgres = try await TestPostgres.start()
        let store = try await Self.open(postgres)
        #expect(try await store.position(user: "bob", device: "phone") == nil)
        _ = try await store.commit([], positions: [DevicePosition(user: "bob", device: "phone", offset: 5)])
        _ = try await store.commit([pgChat("alice", "m-1", to: ["bob"])], positions: [
            DevicePosition(user: "bob", device: "phone", offset: 3), DevicePosition(user: "bob", device: "tablet", offset: 1),
            DevicePosition(user: "alice", device: "phone", offset: 9),
        ])
        #expect(try await store.position(user: "bob", device: "phone") == 5)
        #expect(try await store.position(user: "bob", device: "tablet") == 1)
        #expect(try await store.position(user: "alice", device: "phone") == 9)
        #expect(try await store.position(user: "alice", device: "tablet") == nil)
        await store.close()
    }

    @Test("retention deletes the oldest messages in batches; offsets are never given out again")
    func retention() async throws {
        let postgres = try await TestPostgres.start()
        let store = try await Self.open(postgres)
        let messages = (1...10).map { pgChat("alice", "m-\($0)", to: ["bob"], at: UInt64($0) * 100) }
        _ = try await store.commit(messages, positions: [])
        #expect(try await store.deleteMessages(acceptedBefore: 750, limit: 4) == 4)
        #expect(try await store.bounds(of: "bob") == StreamBounds(last: 10, first: 5))
        #expect(try await store.deleteMessages(acceptedBefore: 750, limit: 4) == 3)
        #expect(try await store.deleteMessages(acceptedBefore: 750, limit: 4) == 0)
        #expect(try await store.read(stream: "bob", after: 0, through: .max, limit: 100).map(\.offset) == [8, 9, 10])
        #expect(try await store.bounds(of: "alice") == StreamBounds(last: 10, first: 8))
        #expect(try await store.deleteMessages(acceptedBefore: .max, limit: 100) == 3)
        #expect(try await store.bounds(of: "bob") == StreamBounds(last: 10, first: 11))
        #expect(try await store.commit([pgChat("alice", "m-11", to: ["bob"])], positions: []) == [.stored([11, 11])])
        let size = try await store.size()
        #expect(size.messages == 1 && size.entries == 2 && size.bytes > 0)
        await store.close()
    }

    @Test("the epoch is kept across reconnecting and opening again, two gateways opening at once agree on it, another database has another")
    func epoch() async throws {
        // fsync on, as in production (the option's one user: no test here can lose power).
        var options = TestPostgres.Options()
        options.fsync = true
        let postgres = try await TestPostgres.start(options)
        // Two gateways opening a new database at once: one creates the tables, both succeed.
        async let first = Self.open(postgres)
        async let second = Self.open(postgres)
        let (one, two) = try await (first, second)
        #expect(one.epoch == two.epoch)
        _ = try await one.commit([pgChat("alice", "m-1", to: ["bob"])], positions: [])
        await one.close()
        await two.close()
        let again = try await Self.open(postgres)
        #expect(again.epoch == one.epoch)
        #expect(try await again.commit([pgChat("alice", "m-2", to: ["bob"])], positions: []) == [.stored([2, 2])], "offsets go on")
        // The pool reconnects after the server's restart; the epoch is the same.
        try await postgres.restart()
        var after: [AppendOutcome]?
        let deadline = ContinuousClock.now + .seconds(30)
        while after == nil {
            do {
                after = try await again.commit([pgChat("alice", "m-3", to: ["bob"])], positions: [])
            } catch let error as ArchiveError where error.code == .unavailable && ContinuousClock.now < deadline {
                // A pooled connection the restart closed; the next one is new.
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        #expect(after == [.stored([3, 3])])
        let reopened = try await Self.open(postgres)
        #expect(reopened.epoch == one.epoch)
        await reopened.close()
        await again.close()
        let other = try await Self.open(postgres, url: try await postgres.createDatabase("other"))
        #expect(other.epoch != one.epoch)
        #expect(try await other.bounds(of: "bob") == .empty)
        await other.close()
    }

    @Test("tables of a newer schema version are refused as corrupt before anything is changed; tables of schema 3 get imgw_trimmed")
    func newerSchema() async throws {
        let postgres = try await TestPostgres.start()
        await (try await Self.open(postgres)).close()
        // As a newer imgw might leave them: a version this one does not know, a table gone.
        try await postgres.client("psql", postgres.psqlArguments + ["-c", "DROP TABLE imgw_trimmed; UPDATE imgw_meta SET value = '5' WHERE key = 'schema'"])
        await #expect {
            _ = try await Self.open(postgres)
        } throws: { error in
            guard let error = error as? ArchiveError else { return false }
            return error.code == .corrupt && error.message.contains("schema 5, written by a newer imgw")
        }
        let table = { try await postgres.client("psql", postgres.psqlArguments + ["-At", "-c", "SELECT to_regclass('imgw_trimmed') IS NOT NULL"]) }
        let schema = { try await postgres.client("psql", postgres.psqlArguments + ["-At", "-c", "SELECT value FROM imgw_meta WHERE key = 'schema'"]) }
        #expect(try await table().trimmingCharacters(in: .whitespacesAndNewlines) == "f")
        #expect(try await schema().trimmingCharacters(in: .whitespacesAndNewlines) == "5")
        // Schema 3 as gateways before the table had it: brought to 4.
        try await postgres.client("psql", postgres.psqlArguments + ["-c", "UPDATE imgw_meta SET value = '3' WHERE key = 'schema'"])
        let store = try await Self.open(postgres)
        #expect(try await table().trimmingCharacters(in: .whitespacesAndNewlines) == "t")
        #expect(try await schema().trimmingCharacters(in: .whitespacesAndNewlines) == "4")
        await store.close()
    }

    @Test("group memberships: unknown until recorded, added and removed (a group whose members all left is known and empty); tables of schema 1 are brought to 4")
    func groupMembers() async throws {
        let postgres = try await TestPostgres.start()
        // Schema 1 as an older imgw left it: no group table.
        await (try await Self.open(postgres)).close()
        try await postgres.client("psql", postgres.psqlArguments + ["-c", "DROP TABLE imgw_group_member; UPDATE imgw_meta SET value = '1' WHERE key = 'schema'"])
        let store = try await Self.open(postgres)
        #expect(try await store.groupMembers("team") == nil)
        try await store.recordGroupMembers("team", ["alice": 10, "bob": 11])
        try await store.recordGroupMembers("team", ["carol": 12, "bob": nil])
        #expect(try await store.groupMembers("team") == ["alice": 10, "carol": 12])
        try await store.recordGroupMembers("team", ["alice": nil, "carol": nil])
        #expect(try await store.groupMembers("team") == [:])
        #expect(try await store.groupMembers("other") == nil)
        let schema = try await postgres.client("psql", postgres.psqlArguments + ["-At", "-c", "SELECT value FROM imgw_meta WHERE key = 'schema'"])
        #expect(schema.trimmingCharacters(in: .whitespacesAndNewlines) == "4")
        await store.close()
    }

    @Test("history pages in order with `complete`, a group member's history from its join, the conversation list with unread counts, read markers (the same checks as SQLite's)")
    func history() async throws {
        let postgres = try await TestPostgres.start()
        let store = try await Self.open(postgres)
        try await ArchiveHistoryScenario.run(store)
        await store.close()
    }

    @Test("the cap per conversation deletes the oldest entries of one stream's conversation, the messages no stream holds, and marks the stream trimmed (the same checks as SQLite's)")
    func trim() async throws {
        let postgres = try await TestPostgres.start()
        let store = try await Self.open(postgres)
        try await ArchiveHistoryScenario.trim(store)
        await store.close()
    }

    @Test("tables of schema 2 get each entry's conversation and the conversation lists from the stored bodies")
    func historyUpgrade() async throws {
        let postgres = try await TestPostgres.start()
        let store = try await Self.open(postgres)
        _ = try await store.commit([
            ArchiveHistoryScenario.direct("alice", "a-1", to: "bob", at: 1_001),
            ArchiveHistoryScenario.direct("bob", "b-1", to: "alice", at: 1_002),
            ArchiveHistoryScenario.direct("alice", "a-2", to: "bob", at: 1_003),
            ArchiveHistoryScenario.inGroup("team", "carol", "g-1", members: ["bob", "carol"], at: 1_004),
        ], positions: [])
        await store.close()
        // As schema 2 left them: no conversations.
        try await postgres.client("psql", postgres.psqlArguments + ["-c", """
            DROP TABLE imgw_conversation; DROP INDEX imgw_entry_conversation; ALTER TABLE imgw_entry DROP COLUMN conversation;
            UPDATE imgw_meta SET value = '2' WHERE key = 'schema'
            """])
        let upgraded = try await Self.open(postgres)
        let bob = try await upgraded.conversations(user: "bob", before: nil, limit: 10)
        #expect(bob.conversations.map(\.conversation) == [.group("team"), .user("alice")])
        #expect(bob.conversations.map(\.unread) == [1, 1] && bob.conversations.map(\.readThrough) == [0, 2])
        #expect(bob.conversations.map(\.lastTime) == [1_004, 1_003] && bob.conversations.last?.last?.messageID == "a-2")
        #expect(try await upgraded.history(stream: "bob", conversation: .user("alice"), position: .latest, limit: 10).entries.map(\.messageID)
                == ["a-1", "b-1", "a-2"])
        let alice = try await upgraded.conversations(user: "alice", before: nil, limit: 10)
        #expect(alice.conversations.map(\.conversation) == [.user("bob")] && alice.conversations.first?.unread == 0)
        await upgraded.close()
    }

    @Test("a URL that is not one, a server that is not there, and a user or database it does not know give clear errors")
    func badURLs() async throws {
        for url in ["mysql://imgw@127.0.0.1/imgw", "postgres://127.0.0.1:5432/imgw", "postgres:///imgw", "postgres://imgw@127.0.0.1/imgw?sslmode=verify-full"] {
            await #expect("\(url)") {
                _ = try await PostgresArchiveStore.open(url: url, logger: Self.logger)
            } throws: { error in
                (error as? ArchiveError)?.code == .misconfigured
            }
        }
        // Nothing listens there: unavailable at once, with a time to retry and the reason.
        let port = freePort()
        let started = ContinuousClock.now
        do {
            _ = try await PostgresArchiveStore.open(url: "postgres://imgw:secret@127.0.0.1:\(port)/imgw", logger: Self.logger)
            Issue.record("opened an archive where no server is")
        } catch {
            #expect(error.code == .unavailable && (error.retryAfter ?? 0) > 0, "\(error)")
            #expect(error.message.contains("127.0.0.1:\(port)"), "names the server: \(error)")
            #expect(error.message.lowercased().contains("refused"), "says why: \(error)")
            #expect(!error.message.contains("secret"), "without the password: \(error)")
        }
        #expect(ContinuousClock.now - started < .seconds(10))
        let postgres = try await TestPostgres.start()
        do {
            _ = try await PostgresArchiveStore.open(url: postgres.url(database: "nosuchdb"), logger: Self.logger)
            Issue.record("opened a database that does not exist")
        } catch {
            #expect(error.code == .misconfigured && error.message.contains("nosuchdb") && error.message.contains("does not exist"), "\(error)")
        }
        do {
            _ = try await PostgresArchiveStore.open(url: "postgres://nobody@127.0.0.1:\(postgres.port)/imgw", logger: Self.logger)
            Issue.record("opened as a role that does not exist")
        } catch {
            #expect(error.code == .misconfigured && error.message.contains("nobody"), "\(error)")
        }
    }

    // MARK: Two gateways at once

    @Test("two gateways appending 10,000 messages to one stream at once: offsets 1...10000 in commit order, a reader polling meanwhile sees each once and in order")
    func commitOrder() async throws {
        let postgres = try await TestPostgres.start()
        let total = 10_000
        let appenders = 16
        let settings = MessageArchive.Settings(writeTimeout: .seconds(30), retention: nil)
        try await Self.withArchives(2, on: postgres, settings) { archives in
            let outcomes = Shared<[String: Result<AppendOutcome, ArchiveError>]>([:])
            let sent = Shared<[String: ArchiveMessage]>([:])
            let appended = Shared(0)
            // The reader: polling bob's stream after what it saw last, as a device catching up
            // would, on each gateway's store in turn.
            let reader = Task { () -> (seen: UInt64, skips: [String], polls: Int, seenWhileAppending: UInt64) in
                var seen: UInt64 = 0
                var skips: [String] = []
                var polls = 0
                var seenWhileAppending: UInt64 = 0
                let deadline = ContinuousClock.now + .seconds(120)
                while seen < UInt64(total), ContinuousClock.now < deadline {
                    polls += 1
                    let entries = try await archives[polls % 2].store.read(stream: "bob", after: seen, through: .max, limit: 1_000)
                    for entry in entries {
                        if entry.offset != seen + 1 { skips.append("offset \(entry.offset) after \(seen)") }
                        seen = max(seen, entry.offset)
                    }
                    if appended.value < total { seenWhileAppending = seen }
                    if entries.isEmpty { try await Task.sleep(for: .milliseconds(2)) }
                }
                return (seen, skips, polls, seenWhileAppending)
            }
            // The writers: each appender on one gateway, one message after the other: to bob
            // (every fifth also to carol), from one of 12 senders that write through both
            // gateways; every fourth appender sends one between other users (dave, erin) after
            // each.
            let started = ContinuousClock.now
            await withTaskGroup { group in
                for appender in 0..<appenders {
                    group.addTask {
                        let archive = archives[appender % 2]
                        for index in stride(from: appender, to: total, by: appenders) {
                            let sender = "s\(index % 12)"
                            var to = index % 5 == 0 ? ["bob", "carol"] : ["bob"]
                            let message = pgChat(sender, "b-\(index)", to: to, text: "to bob \(index)", at: UInt64(index))
                            sent.withLock { $0[message.messageID] = message }
                            let result = await pgAppend(archive, message)
                            outcomes.withLock { $0[message.messageID] = result }
                            appended.withLock { $0 += 1 }
                            if appender % 4 == 3 {
                                to = index % 2 == 0 ? ["dave"] : ["dave", "erin"]
                                let side = pgChat(sender, "o-\(index)", to: to, at: UInt64(index))
                                sent.withLock { $0[side.messageID] = side }
                                let result = await pgAppend(archive, side)
                                outcomes.withLock { $0[side.messageID] = result }
                            }
                        }
                    }
                }
            }
            let appending = ContinuousClock.now - started
            let (seen, skips, polls, seenWhileAppending) = try await reader.value
            let all = outcomes.value
            let messages = sent.value
            #expect(all.count == messages.count)
            let failures = all.filter { if case .success(.stored) = $0.value { false } else { true } }
            #expect(failures.isEmpty, "every append stored: \(failures.prefix(5))")
            // What each append was told: per stream, exactly 1...n.
            var given: [String: [UInt64]] = [:]
            for (id, result) in all {
                guard case .success(.stored(let offsets)) = result, let message = messages[id] else { continue }
                for (copy, offset) in zip(message.copies, offsets) { given[copy.stream, default: []].append(offset) }
            }
            #expect(given["bob"]?.sorted() == (1...UInt64(total)).map { $0 }, "bob: \(given["bob"]?.count ?? 0) offsets")
            for (stream, offsets) in given {
                #expect(offsets.sorted() == (1...UInt64(offsets.count)).map { $0 }, "\(stream): no gap, no repeat")
            }
            #expect(Set(given.keys) == Set(["bob", "carol", "dave", "erin"] + (0..<12).map { "s\($0)" }))
            // What is stored: the same, each offset the message it was told.
            var stored: [StoredEntry] = []
            while stored.count < total {
                let page = try await archives[0].store.read(stream: "bob", after: stored.last?.offset ?? 0, through: .max, limit: 2_000)
                guard !page.isEmpty else { break }
                stored += page
            }
            #expect(stored.map(\.offset) == (1...UInt64(total)).map { $0 })
            let misplaced = stored.filter { entry in
                guard case .success(let outcome)? = all[entry.messageID], let message = messages[entry.messageID] else { return true }
                return outcome.offset(in: "bob", of: message) != entry.offset
            }
            #expect(misplaced.isEmpty, "entries at another offset than their append was told: \(misplaced.prefix(3).map { "\($0.offset) \($0.messageID)" })")
            #expect(try await archives[1].bounds(of: "bob") == StreamBounds(last: UInt64(total), first: 1))
            // The reader never saw an offset before the one below it.
            #expect(skips.isEmpty, "the reader saw offsets out of order: \(skips.prefix(5))")
            #expect(seen == UInt64(total))
            #expect(seenWhileAppending > 0 && polls > 10, "the reader read while the appends went on (\(polls) polls, \(seenWhileAppending) seen before the end)")
            let commits = archives.map { $0.statistics.commits.load(ordering: .relaxed) }
            #expect(commits.allSatisfy { $0 > 50 }, "many transactions from each gateway, not a few big ones: \(commits)")
            print("commit order: \(messages.count) appends in \(appending), commits \(commits), reader \(polls) polls")
        }
    }

    // MARK: The server going away

    enum Outage: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// Every process of the server SIGKILLed, as a crash of the machine.
        case kill9
        /// Fast shutdown: the server ends every session and stops.
        case stop

        var testDescription: String { rawValue }
    }

    @Test("the server killed or stopped under appends: they are refused with a time to retry, none is reported stored that is not, and they go on by themselves once it is back", arguments: Outage.allCases)
    func outage(_ outage: Outage) async throws {
        let postgres = try await TestPostgres.start()
        let settings = MessageArchive.Settings(writeTimeout: .seconds(5), retention: nil)
        try await Self.withArchives(1, on: postgres, settings) { archives in
            let archive = archives[0]
            let counters = Counters()
            let results = Shared<[(message: ArchiveMessage, result: Result<AppendOutcome, ArchiveError>)]>([])
            let done = Shared(false)
            // Four devices of alice's, each sending to bob one message after the other, and
            // after a refusal again once the time it was told (at most 200 ms) has passed.
            let senders = Task {
                await withTaskGroup { group in
                    for device in 0..<4 {
                        group.addTask {
                            var index = 0
                            while !done.value {
                                index += 1
                                let message = pgChat("alice", "d\(device)-\(index)", to: ["bob"], device: "d\(device)", at: UInt64(index))
                                let result = await pgAppend(archive, message)
                                results.withLock { $0.append((message, result)) }
                                switch result {
                                case .success:
                                    counters.add("stored")
                                case .failure(let error):
                                    counters.add("refused")
                                    try? await Task.sleep(for: .milliseconds(min(200, Int(error.retryAfter ?? 200))))
                                }
                            }
                        }
                    }
                }
            }
            #expect(await counters.wait("stored", atLeast: 100, within: .seconds(30)))
            switch outage {
            case .kill9: await postgres.kill9()
            case .stop: await postgres.stopServer()
            }
            let storedBefore = counters.count("stored")
            #expect(await counters.wait("refused", atLeast: 8, within: .seconds(30)), "appends are refused while the server is down")
            // Reads fail too, with the reason.
            do {
                _ = try await archive.read(stream: "bob", after: 0, limit: 10)
                Issue.record("read a stopped server")
            } catch let error as ArchiveError {
                #expect(error.code == .unavailable && error.retryAfter != nil, "\(error)")
                #expect(!error.message.contains("Generic description"), "says what went wrong: \(error)")
            }
            let downFor = counters.count("stored") - storedBefore
            #expect(downFor <= 4, "at most the commits in flight when the server went away are stored: \(downFor)")
            try await postgres.startServer()
            let refusedBefore = counters.count("refused")
            #expect(await counters.wait("stored", atLeast: counters.count("stored") + 50, within: .seconds(60)), "appends are stored again")
            done.withLock { $0 = true }
            await senders.value
            let all = results.value
            let refusals = all.compactMap { if case .failure(let error) = $0.result { error } else { nil } }
            #expect(refusals.count >= refusedBefore)
            #expect(refusals.allSatisfy { $0.code == .unavailable && ($0.retryAfter ?? 0) > 0 }, "\(refusals.prefix(3))")
            print("\(outage): \(all.count) appends, \(refusals.count) refused, e.g. \(refusals.first.map { "\($0)" } ?? "-")")
            // Every append told stored is there, at the offset it was told; bob's stream has no
            // gap.
            let stored = try await archive.read(stream: "bob", after: 0, limit: 100_000)
            #expect(stored.map(\.offset) == (1...UInt64(stored.count)).map { $0 }, "bob's offsets have no gap")
            let byOffset = Dictionary(uniqueKeysWithValues: stored.map { ($0.offset, $0.messageID) })
            for (message, result) in all {
                guard case .success(let outcome) = result else { continue }
                guard let offset = outcome.offset(in: "bob", of: message) else {
                    Issue.record("\(message.messageID): \(outcome)")
                    continue
                }
                #expect(byOffset[offset] == message.messageID, "\(message.messageID) was told offset \(offset)")
            }
            // A refused message sent again is stored now, or found stored (its commit went
            // through after all): never lost, never a reuse.
            var resent: [String: AppendOutcome] = [:]
            for (message, result) in all {
                guard case .failure = result else { continue }
                switch await pgAppend(archive, message) {
                case .success(let outcome):
                    #expect(outcome != .reused, "\(message.messageID)")
                    resent[message.messageID] = outcome
                case .failure(let error):
                    Issue.record("\(message.messageID) sent again: \(error)")
                }
            }
            let everything = try await archive.read(stream: "bob", after: 0, limit: 100_000)
            #expect(Set(everything.map(\.messageID)) == Set(all.map(\.message.messageID)), "every message is stored")
            #expect(everything.count == Set(everything.map(\.messageID)).count, "once")
            let committedAnyway = resent.values.filter { if case .duplicate = $0 { true } else { false } }.count
            print("\(outage): \(resent.count) sent again, \(committedAnyway) of them had been stored after all")
        }
    }

    @Test("a frozen server: appends are refused after the write timeout without waiting for it, and go on once it answers; what committed late is a duplicate when sent again")
    func frozen() async throws {
        let postgres = try await TestPostgres.start()
        let settings = MessageArchive.Settings(writeTimeout: .seconds(1), retention: nil)
        try await Self.withArchives(1, on: postgres, settings) { archives in
            let archive = archives[0]
            // (On a busy machine even a thawed server can miss the 1 s: sent again until stored.)
            #expect(try await Self.offsetsEventually(archive, pgChat("alice", "f-1", to: ["bob"])) == [1, 1])
            postgres.freeze()
            let late = pgChat("alice", "f-2", to: ["bob"])
            let started = ContinuousClock.now
            let refused = await pgAppend(archive, late)
            guard case .failure(let error) = refused else {
                Issue.record("a frozen server stored \(refused)")
                return
            }
            #expect(error.code == .unavailable && error.retryAfter != nil && error.message.contains("within"), "\(error)")
            #expect(ContinuousClock.now - started < .seconds(5))
            #expect(!archive.isAvailable)
            postgres.thaw()
            // The late commit goes through; a resend of it is a duplicate.
            var outcome: AppendOutcome?
            let deadline = ContinuousClock.now + .seconds(30)
            while outcome == nil, ContinuousClock.now < deadline {
                switch await pgAppend(archive, late) {
                case .success(let value): outcome = value
                case .failure(let error): try await Task.sleep(for: .milliseconds(Int(min(error.retryAfter ?? 100, 500))))
                }
            }
            guard case .duplicate(let copies, _)? = outcome else {
                Issue.record("the late commit, sent again: \(String(describing: outcome))")
                return
            }
            #expect(Set(copies) == [StoredCopy(stream: "bob", offset: 2), StoredCopy(stream: "alice", offset: 2, origin: "phone")])
            #expect(try await Self.offsetsEventually(archive, pgChat("alice", "f-3", to: ["bob"])) == [3, 3])
            #expect(archive.isAvailable)
        }
    }

    // MARK: Helpers

    /// The offsets `message` got (bob's copy, then alice's), sending it again after each
    /// refusal for up to 30 s: stored, or found stored by a commit that ended late.
    static func offsetsEventually(_ archive: MessageArchive, _ message: ArchiveMessage) async throws -> [UInt64]? {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            switch await pgAppend(archive, message) {
            case .success(.stored(let offsets)): return offsets
            case .success(.duplicate(let copies, _)):
                return [copies.first { $0.stream == "bob" }?.offset ?? 0, copies.first { $0.stream == "alice" }?.offset ?? 0]
            case .success(.reused): return nil
            case .failure(let error): try await Task.sleep(for: .milliseconds(Int(min(error.retryAfter ?? 100, 500))))
            }
        }
        return nil
    }

    /// Runs `body` with `count` archives (gateways), each over its own store on `postgres`,
    /// then stops them, whether `body` returned or threw (a frozen server is thawed first, so
    /// that their last commits can end).
    static func withArchives(
        _ count: Int, on postgres: TestPostgres, _ settings: MessageArchive.Settings, _ body: ([MessageArchive]) async throws -> Void
    ) async throws {
        var archives: [MessageArchive] = []
        for _ in 0..<count {
            archives.append(MessageArchive(store: try await open(postgres), settings: settings, logger: logger))
        }
        let writers = archives.map { archive in Task { await archive.run() } }
        func stop() async {
            postgres.thaw()
            for writer in writers { writer.cancel() }
            for writer in writers { await writer.value }
        }
        do {
            try await body(archives)
        } catch {
            await stop()
            throw error
        }
        await stop()
    }
}

/// A chat from `sender` with `id` to `to` (and the sender's own copy, from `device`); its
/// fingerprint stands for its recipients and text.
func pgChat(_ sender: String, _ id: String, to: [String], device: String? = "phone", text: String = "hi", at time: UInt64 = 1_000) -> ArchiveMessage {
    var copies = to.map { ArchiveMessage.Copy(stream: $0) }
    if let device { copies.append(.init(stream: sender, origin: device)) }
    // FNV-1a: the same in every process.
    var fingerprint: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in (to.joined(separator: ",") + "|" + text).utf8 {
        fingerprint = (fingerprint ^ UInt64(byte)) &* 0x100_0000_01b3
    }
    return ArchiveMessage(
        sender: sender, messageID: id, fingerprint: fingerprint, serverTime: time,
        body: Array("{\"text\":\"\(text)\"}".utf8), copies: copies)
}

/// What appending `message` came to.
func pgAppend(_ archive: MessageArchive, _ message: ArchiveMessage) async -> Result<AppendOutcome, ArchiveError> {
    await withCheckedContinuation { continuation in
        archive.append(message) { continuation.resume(returning: $0) }
    }
}

/// A value the tasks of a test share.
final class Shared<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>

    init(_ value: Value) { mutex = Mutex(value) }

    var value: Value { mutex.withLock { $0 } }

    func withLock<T: Sendable>(_ body: (inout sending Value) -> sending T) -> T { mutex.withLock(body) }
}

/// Counters the tasks of a test add to, and the test waits on (each wait bounded).
final class Counters: Sendable {
    private struct Waiter {
        var key: String
        var target: Int
        var continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var counts: [String: Int] = [:]
        var waiters: [Int: Waiter] = [:]
        var nextID = 0
    }

    private let state = Mutex(State())

    func add(_ key: String, _ amount: Int = 1) {
        let woken = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
            state.counts[key, default: 0] += amount
            let count = state.counts[key]!
            let ready = state.waiters.filter { $0.value.key == key && count >= $0.value.target }
            for id in ready.keys { state.waiters[id] = nil }
            return ready.values.map(\.continuation)
        }
        for continuation in woken { continuation.resume(returning: true) }
    }

    func count(_ key: String) -> Int { state.withLock { $0.counts[key, default: 0] } }

    /// Whether `key` reaches `target` within `limit` (at once if it has).
    func wait(_ key: String, atLeast target: Int, within limit: Duration) async -> Bool {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        let timer = Task {
            try await Task.sleep(for: limit)
            self.state.withLock { $0.waiters.removeValue(forKey: id) }?.continuation.resume(returning: false)
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { continuation in
            let reached = state.withLock { state in
                if state.counts[key, default: 0] >= target { return true }
                state.waiters[id] = Waiter(key: key, target: target, continuation: continuation)
                return false
            }
            if reached { continuation.resume(returning: true) }
        }
    }
}
