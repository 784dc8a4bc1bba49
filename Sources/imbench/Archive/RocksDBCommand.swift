import ArgumentParser
import Foundation

/// `imbench rocksdb`: the archive's lean records (``LeanRecord``) written through RocksDB's C
/// API from Swift by one writer, then read back.
///
/// The fill: `messages` one-to-one chats between `users` users, chosen as `imbench history`
/// chooses them (``HistoryPlan``: 90% between a user and one of 10 contacts, 10% with one of
/// `heavy` users; the same seeds), with 64-byte bodies, five records each, in write batches of
/// `batch` messages through the WAL without an fsync per batch. The reads, one at a time and
/// each timed: catch-up scans (a random user's stream from a random offset, up to 200 entries)
/// and history pages (a random normal user's conversation with its first contact, the newest
/// 50 messages). Reports the fill's rate (overall, its first and its last million), the CPU
/// this process spent per 1,000 messages (the writer and RocksDB's background threads), bytes on
/// disk per message after a flush, read latencies, and the options RocksDB ran with.
struct RocksDBCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rocksdb",
        abstract: "The archive's lean records through RocksDB's C API: msg/s, CPU per 1,000, bytes per message, catch-up and history reads.")

    /// Entries per catch-up scan at most.
    static let scanLimit = 200
    /// Messages per history page.
    static let pageSize = 50
    /// Bytes of each message's body.
    static let bodySize = 64

    @Option(help: "The database directory: new or empty, and kept (default: a temporary directory, removed at the end unless --keep).")
    var path: String?

    @Flag(help: "Keep the temporary directory (its path is printed).")
    var keep = false

    @Option(help: "Messages written.")
    var messages = 10_000_000

    @Option(help: "Users.")
    var users = 100_000

    @Option(help: "Users with 1,000 conversations each (as in imbench history).")
    var heavy = 100

    @Option(help: "Messages per write batch.")
    var batch = 512

    @Option(help: "Catch-up scans read after the fill (a random user's stream from a random offset, up to 200 entries).")
    var scans = 2_000

    @Option(help: "History pages read after the fill (a random normal user's conversation with its first contact: the newest 50 messages).")
    var pages = 2_000

    @Option(name: .customLong("block-cache-mb"), help: "RocksDB's block cache (LRU), MB.")
    var blockCacheMB = 256

    @Option(name: .customLong("write-buffer-mb"), help: "One memtable, MB (RocksDB's level-style tuning gets four times this as its memtable budget).")
    var writeBufferMB = 64

    @Option(help: "Compression of levels 2 and deeper (levels 0 and 1 stay uncompressed): none, lz4, zstd or snappy (default: lz4 when this librocksdb has it, else none).")
    var compression: String?

    func validate() throws {
        guard messages >= 1_000, users >= 1_000, (1...users / 10).contains(heavy) else {
            throw ValidationError("--messages and --users at least 1,000, --heavy 1 to a tenth of --users")
        }
        guard batch >= 1, scans >= 0, pages >= 0 else { throw ValidationError("--batch at least 1, --scans and --pages not negative") }
        guard (1...65_536).contains(blockCacheMB) else { throw ValidationError("--block-cache-mb is 1 to 65536") }
        guard (1...4_096).contains(writeBufferMB) else { throw ValidationError("--write-buffer-mb is 1 to 4096") }
        if let compression, RocksDBStore.Compression(rawValue: compression) == nil {
            throw ValidationError("--compression is none, lz4, zstd or snappy, not \(compression)")
        }
        if let path {
            guard !keep else { throw ValidationError("--keep is for the temporary directory: a --path is always kept") }
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
                guard isDirectory.boolValue else { throw ValidationError("--path \(path) is a file, not a directory") }
                guard (try FileManager.default.contentsOfDirectory(atPath: path)).isEmpty else {
                    throw ValidationError("--path \(path) is not empty: the fill needs a new database")
                }
            }
        }
    }

    func run() throws {
        let chosen = try resolvedCompression()
        let directory: String
        if let path {
            directory = path
        } else {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("imbench-rocksdb-\(UInt32.random(in: 0...UInt32.max))").path
        }
        // The store is closed when `measure` returns or throws, before its directory goes.
        defer {
            if path == nil {
                if keep { Log.info("kept \(directory)") } else { try? FileManager.default.removeItem(atPath: directory) }
            }
        }
        let json = try measure(directory: directory, compression: chosen)
        json.print()
    }

    /// The compression asked for, or lz4 if this librocksdb has it, else none.
    private func resolvedCompression() throws -> RocksDBStore.Compression {
        if let compression, let chosen = RocksDBStore.Compression(rawValue: compression) {
            guard try RocksDBStore.supports(chosen) else {
                throw ValidationError("--compression \(compression): this librocksdb is built without it")
            }
            return chosen
        }
        if try RocksDBStore.supports(.lz4) { return .lz4 }
        Log.info("this librocksdb has no LZ4: no compression")
        return RocksDBStore.Compression.none
    }

    private func measure(directory: String, compression: RocksDBStore.Compression) throws -> JSONLine {
        let options = RocksDBStore.Options(blockCacheMB: blockCacheMB, writeBufferMB: writeBufferMB, compression: compression, parallelism: 2, sync: false)
        let store = try RocksDBStore.open(path: directory, options: options)
        defer { store.close() }
        let archive = RocksDBArchive(store: store)
        let plan = HistoryPlan(messages: messages, users: users, heavy: heavy, days: 60, now: UInt64(Date().timeIntervalSince1970 * 1000))
        Log.info("rocksdb \(directory): \(messages) messages between \(users) users, batches of \(batch), \(compression.rawValue)")

        let fill = try self.fill(archive, plan: plan)
        let flushStarted = MonotonicClock.nanoseconds()
        try store.flush()
        let flushSeconds = MonotonicClock.seconds(since: flushStarted)
        let bytes = store.bytesOnDisk()
        let levels: [Int?] = (0..<store.tuning.compressionPerLevel.count).map { (level: Int) -> Int? in
            store.propertyText("rocksdb.num-files-at-level\(level)").flatMap { Int($0) }
        }
        let pendingCompaction = store.property("rocksdb.estimate-pending-compaction-bytes")
        let sstBytes = store.property("rocksdb.total-sst-files-size")

        var random = SplitMix(seed: 20261128)
        let scan = try catchUpScans(archive, plan: plan, random: &random)
        let page = try historyPages(archive, plan: plan, random: &random)

        var json = JSONLine()
        json.add("benchmark", "rocksdb")
        json.add("messages", messages)
        json.add("users", users)
        json.add("heavy", heavy)
        json.add("batch", batch)
        json.add("body_bytes", Self.bodySize)
        json.add("records_per_message", 5)
        json.add("fill_s", fill.seconds, decimals: 1)
        json.add("fill_msgs_per_s", Double(messages) / fill.seconds, decimals: 0)
        json.add("fill_window_messages", fill.window)
        json.add("fill_first_msgs_per_s", fill.firstRate, decimals: 0)
        json.add("fill_last_msgs_per_s", fill.lastRate, decimals: 0)
        json.add("fill_cpu_s_per_1000", fill.cpuSeconds / Double(messages) * 1000, decimals: 4)
        json.add("flush_s", flushSeconds, decimals: 2)
        json.add("bytes", bytes)
        json.add("bytes_per_message", Double(bytes) / Double(messages), decimals: 1)
        let sst: Int? = sstBytes.map { Int($0) }
        let pending: Int? = pendingCompaction.map { Int($0) }
        let perLevel: [JSONLine.Value] = levels.map { (files: Int?) -> JSONLine.Value in files.map { JSONLine.Value.int($0) } ?? .null }
        json.add("sst_bytes", sst)
        json.add("pending_compaction_bytes", pending)
        json.add("sst_files_per_level", JSONLine.Value.array(perLevel))
        json.add("scans", scans)
        json.add("scan_limit", Self.scanLimit)
        json.add("scan_mean_entries", scans > 0 ? Double(scan.entries) / Double(scans) : nil, decimals: 1)
        json.addTimes("scan", scan.times)
        json.add("pages", pages)
        json.add("page_size", Self.pageSize)
        json.add("page_mean_entries", pages > 0 ? Double(page.entries) / Double(pages) : nil, decimals: 1)
        json.addTimes("page", page.times)
        json.add("rocksdb", .object(Self.describe(store)))

        let window = Self.count(fill.window)
        let perThousand = fill.cpuSeconds / Double(messages) * 1000
        let perMessage = Double(bytes) / Double(messages)
        let levelFiles = levels.map { (files: Int?) -> String in files.map { String($0) } ?? "?" }.joined(separator: "/")
        Log.info("fill: \(Self.fixed(fill.seconds, 1)) s, \(Self.fixed(Double(messages) / fill.seconds, 0)) msg/s (first \(window): \(Self.fixed(fill.firstRate, 0)), last \(window): \(Self.fixed(fill.lastRate, 0))), \(Self.fixed(perThousand, 4)) CPU s per 1,000 messages")
        Log.info("disk after the flush (\(Self.fixed(flushSeconds, 2)) s): \(bytes) bytes, \(Self.fixed(perMessage, 1)) per message; SST files per level \(levelFiles)")
        Log.info("catch-up scans: \(scans), \(Self.fixed(scans > 0 ? Double(scan.entries) / Double(scans) : nil, 1)) entries on average, \(Self.latencies(scan.times))")
        Log.info("history pages: \(pages), \(Self.fixed(pages > 0 ? Double(page.entries) / Double(pages) : nil, 1)) messages on average, \(Self.latencies(page.times))")
        return json
    }

    /// How the fill went: its seconds and CPU seconds, and the rates of its first and last
    /// `window` messages (a million, or a tenth of a fill under two million).
    struct Fill {
        var seconds: Double
        var cpuSeconds: Double
        var window: Int
        var firstRate: Double?
        var lastRate: Double?
    }

    private func fill(_ archive: RocksDBArchive, plan: HistoryPlan) throws -> Fill {
        let body = [UInt8](repeating: UInt8(ascii: "x"), count: Self.bodySize)
        let window = messages >= 2_000_000 ? 1_000_000 : max(1, messages / 10)
        let cpuBefore = ArchiveCommand.cpuSeconds()
        let started = MonotonicClock.nanoseconds()
        var firstRate: Double?
        // The last batch end at or before `messages - window`: where the last window starts.
        var lastStart = (count: 0, time: started)
        var progress = (count: 0, time: started)
        var written = 0
        while written < messages {
            let end = min(written + batch, messages)
            for index in written..<end { archive.append(plan.leanChat(index, body: body)) }
            try archive.commit()
            written = end
            let now = MonotonicClock.nanoseconds()
            if firstRate == nil, written >= window { firstRate = Double(written) / (Double(now - started) / 1e9) }
            if written <= messages - window { lastStart = (written, now) }
            if written - progress.count >= 1_000_000 || written == messages {
                let rate = Double(written - progress.count) / (Double(now - progress.time) / 1e9)
                Log.info("filled \(written) messages (\(Self.fixed(rate, 0)) msg/s since \(progress.count))")
                progress = (written, now)
            }
        }
        let finished = MonotonicClock.nanoseconds()
        let cpu = ArchiveCommand.cpuSeconds() - cpuBefore
        let lastRate = Double(messages - lastStart.count) / (Double(finished - lastStart.time) / 1e9)
        return Fill(seconds: Double(finished - started) / 1e9, cpuSeconds: cpu, window: window, firstRate: firstRate, lastRate: lastRate)
    }

    /// Catch-up scans, each timed (ns) and checked: the entries from the offset on, in order,
    /// with no gap, as many as the stream holds up to the limit.
    private func catchUpScans(_ archive: RocksDBArchive, plan: HistoryPlan, random: inout SplitMix) throws -> (times: [UInt64], entries: Int) {
        var times: [UInt64] = []
        times.reserveCapacity(scans)
        var total = 0
        for _ in 0..<scans {
            let stream = plan.name(Int(random.next() % UInt64(users)))
            let last = archive.lastOffset(stream: stream)
            let from = last == 0 ? 1 : 1 + random.next() % last
            let started = MonotonicClock.nanoseconds()
            let entries = try archive.read(stream: stream, from: from, limit: Self.scanLimit)
            times.append(MonotonicClock.nanoseconds() - started)
            let expected = last == 0 ? 0 : min(Self.scanLimit, Int(last - from + 1))
            let inOrder = entries.indices.allSatisfy { (index: Int) -> Bool in entries[index].offset == from + UInt64(index) }
            guard entries.count == expected, inOrder else {
                throw BenchError("the catch-up scan of \(stream) from offset \(from) read offsets \(entries.first?.offset ?? 0)...\(entries.last?.offset ?? 0) (\(entries.count)), not \(expected) from \(from)")
            }
            total += entries.count
        }
        return (times.sorted(), total)
    }

    /// History pages, each timed (ns) and checked: the conversation's newest messages, newest
    /// first, as many as it holds up to a page.
    private func historyPages(_ archive: RocksDBArchive, plan: HistoryPlan, random: inout SplitMix) throws -> (times: [UInt64], entries: Int) {
        var times: [UInt64] = []
        times.reserveCapacity(pages)
        var total = 0
        for _ in 0..<pages {
            let user = plan.normalUser(Int(random.next() % UInt64(users - heavy)))
            let (name, peer) = (plan.name(user), plan.name(plan.contact(of: user, 0)))
            let started = MonotonicClock.nanoseconds()
            let page = try archive.history(name, peer, limit: Self.pageSize)
            times.append(MonotonicClock.nanoseconds() - started)
            let last = archive.lastSequence(name, peer)
            let expected = min(Self.pageSize, Int(last))
            let newestFirst = page.indices.allSatisfy { (index: Int) -> Bool in page[index].sequence == last - UInt64(index) }
            guard page.count == expected, newestFirst else {
                throw BenchError("the history page of \(name) with \(peer) read sequences \(page.first?.sequence ?? 0) down to \(page.last?.sequence ?? 0) (\(page.count)), not \(expected) down from \(last)")
            }
            total += page.count
        }
        return (times.sorted(), total)
    }

    /// The options RocksDB ran with, as read back from it.
    private static func describe(_ store: RocksDBStore) -> JSONLine {
        var line = JSONLine()
        line.add("version", store.writtenVersion())
        line.add("compression", store.options.compression.rawValue)
        line.add("compression_per_level", store.tuning.compressionPerLevel.map(\.rawValue).joined(separator: ","))
        line.add("block_cache_mb", store.options.blockCacheMB)
        line.add("write_buffer_mb", Double(store.tuning.writeBufferSize) / 1_048_576, decimals: 2)
        line.add("max_write_buffer_number", store.tuning.maxWriteBufferNumber)
        line.add("min_write_buffer_number_to_merge", store.tuning.minWriteBufferNumberToMerge)
        line.add("level0_file_num_compaction_trigger", store.tuning.level0FileNumCompactionTrigger)
        line.add("target_file_size_base_mb", Double(store.tuning.targetFileSizeBase) / 1_048_576, decimals: 2)
        line.add("max_bytes_for_level_base_mb", Double(store.tuning.maxBytesForLevelBase) / 1_048_576, decimals: 2)
        line.add("max_background_jobs", store.tuning.maxBackgroundJobs)
        line.add("parallelism", store.options.parallelism)
        line.add("wal", true)
        line.add("sync", store.options.sync)
        return line
    }

    /// `value` with `decimals` places ("-" for none).
    private static func fixed(_ value: Double?, _ decimals: Int) -> String {
        guard let value else { return "-" }
        return String(format: "%.\(decimals)f", value)
    }

    /// "p50 … ms, p99 … ms, max … ms" of sorted nanoseconds.
    private static func latencies(_ sorted: [UInt64]) -> String {
        let p50 = fixed(ArchiveCommand.percentile(sorted, 0.5), 3)
        let p99 = fixed(ArchiveCommand.percentile(sorted, 0.99), 3)
        let max = fixed(ArchiveCommand.percentile(sorted, 1), 3)
        return "p50 \(p50) ms, p99 \(p99) ms, max \(max) ms"
    }

    private static func count(_ messages: Int) -> String {
        messages % 1_000_000 == 0 ? "\(messages / 1_000_000)M" : "\(messages)"
    }
}
