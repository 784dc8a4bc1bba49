import AsyncToolkit
import ArgumentParser
import Foundation
import IMArchive
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// `imbench archive`: the message archive alone, as the gateway uses it (MessageArchive's
/// group commit over a store): `senders` connections each with a window of appends in flight,
/// each message a one-to-one chat (the recipient's copy and the sender's own) or a group
/// message (a copy per member); then a catch-up read of one stream. Reports messages/s, the CPU
/// this process spent per 1,000 messages (the archive's writer, SQLite or postgres-nio, and the
/// appending), commits and the mean batch, append latency, and bytes per message on disk.
struct ArchiveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "archive",
        abstract: "The message archive alone: messages/s, CPU per 1,000, latency, bytes per message, catch-up reads.")

    @Option(help: "sqlite (sync normal), sqlite-full (sync full) or a postgres:// URL.")
    var store = "sqlite"

    @Option(help: "Messages to store.")
    var messages = 100_000

    @Option(help: "Concurrent senders (connections), each with --window appends in flight.")
    var senders = 8

    @Option(help: "Appends in flight per sender.")
    var window = 64

    @Option(help: "Text bytes per message.")
    var size = 64

    @Option(help: "Recipients per message: 1, a one-to-one chat; more, a group message with this many other members.")
    var recipients = 1

    @Option(help: "Entries read back from one stream afterwards (a device catching up), in pages of 128.")
    var catchUp = 1_000

    @Option(help: "Messages per transaction at most (archive.max_batch).")
    var maxBatch = 512

    func validate() throws {
        guard messages >= 1, senders >= 1, window >= 1, size >= 0, recipients >= 1, catchUp >= 0, maxBatch >= 1 else {
            throw ValidationError("every count must be positive")
        }
        guard ["sqlite", "sqlite-full"].contains(store) || store.hasPrefix("postgres") else {
            throw ValidationError("--store is sqlite, sqlite-full or a postgres:// URL")
        }
    }

    func run() async throws {
        var logger = Logger(label: "imbench-archive")
        logger.logLevel = .warning
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imbench-archive-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("archive.sqlite").path
        let opened: any ArchiveStore = store.hasPrefix("postgres")
            ? try await PostgresArchiveStore.open(url: store, logger: logger)
            : try SQLiteArchiveStore.open(path: path, synchronous: store == "sqlite-full" ? .full : .normal)
        let archive = MessageArchive(store: opened, settings: .init(maxBatch: maxBatch, retention: nil), logger: logger)
        let writer = Task { await archive.run() }
        // Streams of this run only (a PostgreSQL database may hold earlier runs).
        let run = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let before = try await opened.size()
        Log.info("archive \(opened.description): \(messages) messages, \(senders) senders x \(window) in flight, \(size) B, \(recipients) recipient(s)")

        let text = String(repeating: "x", count: size)
        let latencies = Latencies()
        let cpuBefore = Self.cpuSeconds()
        let started = MonotonicClock.nanoseconds()
        let perSender = (messages + senders - 1) / senders
        try await withThrowingTaskGroup(of: Void.self) { group in
            for sender in 0..<senders {
                let count = min(perSender, messages - sender * perSender)
                guard count > 0 else { continue }
                group.addTask {
                    try await Self.send(
                        count, from: "s\(sender)-\(run)", recipients: (0..<recipients).map { "r\(($0 + sender) % max(1, recipients))-\(run)" },
                        text: text, window: window, archive: archive, latencies: latencies)
                }
            }
            try await group.waitForAll()
        }
        let elapsed = Double(MonotonicClock.nanoseconds() - started) / 1e9
        let cpu = Self.cpuSeconds() - cpuBefore
        let commits = archive.statistics.commits.load(ordering: .relaxed)

        // A device catching up: one stream, read in pages.
        let stream = "r0-\(run)"
        let readStarted = MonotonicClock.nanoseconds()
        var read = 0
        var cursor: UInt64 = 0
        while read < catchUp {
            let page = try await archive.read(stream: stream, after: cursor, limit: min(128, catchUp - read))
            guard let last = page.last else { break }
            read += page.count
            cursor = last.offset
        }
        let readSeconds = Double(MonotonicClock.nanoseconds() - readStarted) / 1e9

        writer.cancel()
        await writer.value
        // Closed: the WAL is checkpointed into the file, which then holds everything.
        let after = store.hasPrefix("postgres") ? try await Self.reopenSize(url: store, logger: logger) : Self.fileSize(path)
        let bytes = after - (store.hasPrefix("postgres") ? before.bytes : 0)
        let sorted = latencies.values.withLock { $0 }.sorted()
        var json = JSONLine()
        json.add("benchmark", "archive")
        json.add("store", store.hasPrefix("postgres") ? "postgres" : store)
        json.add("messages", messages)
        json.add("senders", senders)
        json.add("window", window)
        json.add("size", size)
        json.add("recipients", recipients)
        json.add("msgs_per_s", Double(messages) / elapsed, decimals: 0)
        json.add("cpu_s_per_1000", cpu / Double(messages) * 1000, decimals: 4)
        json.add("commits", commits)
        json.add("mean_batch", commits > 0 ? Double(messages) / Double(commits) : nil, decimals: 1)
        json.add("append_p50_ms", Self.percentile(sorted, 0.5), decimals: 3)
        json.add("append_p99_ms", Self.percentile(sorted, 0.99), decimals: 3)
        json.add("bytes_per_message", Double(bytes) / Double(messages), decimals: 0)
        json.add("catch_up_entries", read)
        json.add("catch_up_ms", readSeconds * 1000, decimals: 2)
        json.print()
        Log.info(String(format: "%.0f msg/s, %.4f CPU s per 1,000, %d commits (%.1f per commit), p99 %.2f ms, %.0f B per message; %d entries read back in %.1f ms",
                        Double(messages) / elapsed, cpu / Double(messages) * 1000, commits, commits > 0 ? Double(messages) / Double(commits) : 0,
                        Self.percentile(sorted, 0.99) ?? 0, Double(bytes) / Double(messages), read, readSeconds * 1000))
    }

    /// One sender: `count` messages, `window` in flight; each completion (on the archive's
    /// writer, as in the gateway: no task per message) appends the next.
    static func send(
        _ count: Int, from sender: String, recipients: [String], text: String, window: Int, archive: MessageArchive,
        latencies: Latencies
    ) async throws {
        let body = Array("{\"from\":\"\(sender)\",\"text\":\"\(text)\",\"type\":\"text\"}".utf8)
        let copies = recipients.map { ArchiveMessage.Copy(stream: $0) } + [ArchiveMessage.Copy(stream: sender, origin: "phone")]
        let pump = Pump(count: count)
        @Sendable func appendNext() {
            guard let index = pump.take() else { return }
            let message = ArchiveMessage(
                sender: sender, messageID: "m-\(index)", fingerprint: UInt64(index), serverTime: UInt64(Date().timeIntervalSince1970 * 1000),
                body: body, copies: copies)
            let started = MonotonicClock.nanoseconds()
            archive.append(message) { result in
                let took = MonotonicClock.nanoseconds() - started
                latencies.values.withLock { $0.append(took) }
                if case .failure(let error) = result { Log.info("append failed: \(error)") }
                if !pump.finished() { appendNext() }
            }
        }
        for _ in 0..<min(window, count) { appendNext() }
        await pump.allDone()
    }

    /// Which message a sender appends next, and how many are done.
    final class Pump: Sendable {
        let count: Int
        private let state = AsyncCondition((next: 0, done: 0))

        init(count: Int) { self.count = count }

        /// The next index to append, if any is left.
        func take() -> Int? {
            state.withLock { state in
                guard state.next < count else { return nil }
                defer { state.next += 1 }
                return state.next
            }
        }

        /// One more is done: whether it was the last.
        func finished() -> Bool {
            state.withLock { state in
                state.done += 1
                return state.done == count
            }
        }

        /// Returns once all `count` are done.
        func allDone() async {
            let count = self.count
            await state.waitIgnoringCancellation { $0.done == count ? () : nil }
        }
    }

    /// Append latencies, nanoseconds.
    final class Latencies: Sendable {
        let values = Mutex<[UInt64]>([])
    }

    static func percentile(_ sorted: [UInt64], _ p: Double) -> Double? {
        guard !sorted.isEmpty else { return nil }
        return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]) / 1e6
    }

    /// This process's user + system CPU seconds.
    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    static func fileSize(_ path: String) -> Int {
        ["", "-wal"].reduce(0) { total, suffix in
            total + (((try? FileManager.default.attributesOfItem(atPath: path + suffix))?[.size] as? NSNumber)?.intValue ?? 0)
        }
    }

    static func reopenSize(url: String, logger: Logger) async throws -> Int {
        let store = try await PostgresArchiveStore.open(url: url, logger: logger)
        defer { Task { await store.close() } }
        return try await store.size().bytes
    }
}

extension JSONLine {
    /// `<prefix>_p50_ms`, `_p99_ms` and `_max_ms` of `times` (nanoseconds).
    mutating func addTimes(_ prefix: String, _ times: [UInt64]) {
        add("\(prefix)_p50_ms", ArchiveCommand.percentile(times, 0.5), decimals: 3)
        add("\(prefix)_p99_ms", ArchiveCommand.percentile(times, 0.99), decimals: 3)
        add("\(prefix)_max_ms", ArchiveCommand.percentile(times, 1), decimals: 3)
    }
}
