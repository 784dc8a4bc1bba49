import ArgumentParser
import Foundation
import IMArchive
import Logging

/// `imbench history`: history pages and conversation lists read from a large archive, as a
/// device asks for them (one query at a time, each timed), and the archive's size per message.
///
/// The archive is filled first, through ``MessageArchive`` as the gateway writes it, unless it
/// already holds `messages` (a kept SQLite file, or a PostgreSQL database filled before): one-
/// to-one chats between `users` users, 90% of them between a user and one of 10 contacts (the
/// first, a best friend both ways, gets 70% of them: conversations long enough for several
/// pages), and
/// 10% between one of `heavy` users and one of 1,000 contacts each (the users whose list has
/// 1,000 conversations). Message times spread evenly over the `days` before now, oldest first,
/// so that a retention shorter than `days` has old messages to delete.
struct HistoryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "history",
        abstract: "History pages and conversation lists on a large archive: latency per query, bytes per message.")

    @Option(help: "sqlite, or a postgres:// URL.")
    var store = "sqlite"

    @Option(help: "The SQLite file (kept, and used again when it holds --messages already; default: a temporary file).")
    var path: String?

    @Option(help: "Messages in the archive.")
    var messages = 10_000_000

    @Option(help: "Users.")
    var users = 100_000

    @Option(help: "Users with 1,000 conversations each.")
    var heavy = 100

    @Option(help: "The message times spread over this many days before now.")
    var days = 60

    @Option(help: "History pages read (half the newest page, half a page before a random message).")
    var pages = 2_000

    @Option(help: "Messages per history page.")
    var pageSize = 50

    @Option(help: "Conversation lists read (the first screen of a heavy user).")
    var lists = 1_000

    @Option(help: "Conversations per list screen.")
    var screen = 50

    @Option(help: "Concurrent appenders while filling, each with 64 in flight.")
    var senders = 8

    @Option(help: "Messages per transaction at most while filling (archive.max_batch).")
    var fillBatch = 512

    @Option(help: "SQLite's page cache per connection while filling, MB (default: SQLite's 2 MB, as imgw has; the reads after the fill reopen the file with it).")
    var fillCacheMB: Int?

    func validate() throws {
        guard messages >= 1_000, users >= 1_000, (1...users / 10).contains(heavy), days >= 1, pages >= 1, lists >= 1,
              (1...200).contains(pageSize), (1...200).contains(screen), senders >= 1
        else {
            throw ValidationError("--messages and --users at least 1,000, --heavy 1 to a tenth of --users, page sizes 1-200, every count positive")
        }
        guard store == "sqlite" || store.hasPrefix("postgres") else { throw ValidationError("--store is sqlite or a postgres:// URL") }
        guard path == nil || store == "sqlite" else { throw ValidationError("--path is the SQLite file") }
    }

    func run() async throws {
        var logger = Logger(label: "imbench-history")
        logger.logLevel = .warning
        var temporary: URL?
        let file: String
        if let path {
            file = path
        } else {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imbench-history-\(UInt32.random(in: 0...UInt32.max))")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            temporary = directory
            file = directory.appendingPathComponent("archive.sqlite").path
        }
        defer { if let temporary { try? FileManager.default.removeItem(at: temporary) } }
        let sqlite = store == "sqlite"
        let filling: any ArchiveStore = sqlite
            ? try SQLiteArchiveStore.open(path: file, synchronous: .normal, cacheKiB: fillCacheMB.map { $0 * 1024 })
            : try await PostgresArchiveStore.open(url: store, logger: logger)
        // Retention off: the fill writes old messages on purpose.
        let filler = MessageArchive(store: filling, settings: .init(maxBatch: fillBatch, retention: nil), logger: logger)
        let fillWriter = Task { await filler.run() }
        let plan = HistoryPlan(messages: messages, users: users, heavy: heavy, days: days, now: UInt64(Date().timeIntervalSince1970 * 1000))

        var json = JSONLine()
        json.add("benchmark", "history")
        json.add("store", sqlite ? "sqlite" : "postgres")
        json.add("messages", messages)
        json.add("users", users)
        // Whatever happens, the writer stops (and closes the store) before what follows, or
        // before the process exits with an error: exiting with it still committing ends in a crash.
        let fillOutcome: Result<(seconds: Double, cpu: Double)?, any Error>
        do {
            let held = try await filling.size()
            if held.messages >= messages {
                Log.info("\(filling.description) holds \(held.messages) messages already: not filled again")
                fillOutcome = .success(nil)
            } else if held.messages > 0 {
                throw ValidationError("\(filling.description) holds \(held.messages) messages, not \(messages): use another file or database")
            } else {
                fillOutcome = .success(try await fill(filler, plan: plan))
            }
        } catch {
            fillOutcome = .failure(error)
        }
        fillWriter.cancel()
        await fillWriter.value
        if let (seconds, cpu) = try fillOutcome.get() {
            json.add("filled", true)
            json.add("fill_s", seconds, decimals: 1)
            json.add("fill_msgs_per_s", Double(messages) / seconds, decimals: 0)
            json.add("fill_cpu_s_per_1000", cpu / Double(messages) * 1000, decimals: 4)
        } else {
            json.add("filled", false)
        }
        // (Stopping the writer closed the store. The reads open it again as imgw does.)
        let opened: any ArchiveStore = sqlite
            ? try SQLiteArchiveStore.open(path: file, synchronous: .normal)
            : try await PostgresArchiveStore.open(url: store, logger: logger)
        let archive = MessageArchive(store: opened, settings: .init(retention: nil), logger: logger)
        let writer = Task { await archive.run() }
        // Reads, one at a time as one device asks, each timed from call to answer.
        var random = SplitMix(seed: 20261128)
        var pageTimes: [UInt64] = []
        var pageEntries = 0
        var fullPages = 0
        for index in 0..<pages {
            let user = plan.normalUser(Int(random.next() % UInt64(users - heavy)))
            let peer = plan.contact(of: user, 0)
            let conversation = Conversation.user(plan.name(peer))
            var position = HistoryPosition.latest
            if index % 2 == 1 {
                // Before a message somewhere in the conversation: its newest page's oldest
                // offset, minus a random share of the stream's length.
                let newest = try await archive.history(stream: plan.name(user), conversation: conversation, position: .latest, limit: 1)
                if let last = newest.entries.last?.offset { position = .before(max(2, last - random.next() % last)) }
            }
            let started = MonotonicClock.nanoseconds()
            let page = try await archive.history(stream: plan.name(user), conversation: conversation, position: position, limit: pageSize)
            pageTimes.append(MonotonicClock.nanoseconds() - started)
            pageEntries += page.entries.count
            if page.entries.count == pageSize { fullPages += 1 }
        }
        var listTimes: [UInt64] = []
        var listed = 0
        for _ in 0..<lists {
            let user = Int(random.next() % UInt64(heavy))
            let started = MonotonicClock.nanoseconds()
            let page = try await archive.conversations(user: plan.name(user), before: nil, limit: screen)
            listTimes.append(MonotonicClock.nanoseconds() - started)
            listed += page.conversations.count
        }
        // How many conversations a heavy user has (the whole list, paged).
        var conversations = 0
        var before: UInt64?
        while true {
            let page = try await archive.conversations(user: plan.name(0), before: before, limit: 200)
            conversations += page.conversations.count
            guard !page.complete, let last = page.conversations.last else { break }
            before = last.lastOffset
        }
        let counts = try await opened.size()
        // Stopping the writer closes the store (SQLite: the WAL checkpointed into the file).
        writer.cancel()
        await writer.value
        let bytes = sqlite ? ArchiveCommand.fileSize(file) : try await ArchiveCommand.reopenSize(url: store, logger: logger)
        json.add("bytes", bytes)
        json.add("entries", counts.entries)
        json.add("bytes_per_message", Double(bytes) / Double(max(1, counts.messages)), decimals: 0)

        pageTimes.sort()
        listTimes.sort()
        json.add("history_pages", pages)
        json.add("history_page_size", pageSize)
        json.add("history_mean_entries", Double(pageEntries) / Double(pages), decimals: 1)
        json.add("history_full_pages", fullPages)
        json.addTimes("history", pageTimes)
        json.add("lists", lists)
        json.add("list_screen", screen)
        json.add("list_mean_conversations", Double(listed) / Double(lists), decimals: 1)
        json.add("heavy_user_conversations", conversations)
        json.addTimes("list", listTimes)
        json.print()
    }

    /// Appends the plan's messages in order, `senders` appenders each with 64 in flight;
    /// returns the seconds and this process's CPU seconds it took.
    private func fill(_ archive: MessageArchive, plan: HistoryPlan) async throws -> (Double, Double) {
        let cpuBefore = ArchiveCommand.cpuSeconds()
        let started = MonotonicClock.nanoseconds()
        // As `imbench archive` appends: each completion (on the archive's writer) appends the
        // next; `senders` × 64 in flight.
        let pump = ArchiveCommand.Pump(count: messages)
        let inFlight = min(senders * 64, messages)
        @Sendable func appendNext() {
            guard let index = pump.take() else { return }
            archive.append(plan.message(index)) { _ in
                if index % 1_000_000 == 0, index > 0 { Log.info("filled \(index) messages") }
                if !pump.finished() { appendNext() }
            }
        }
        for _ in 0..<inFlight { appendNext() }
        await pump.allDone()
        // Every refused append is counted by the archive.
        let failed = archive.statistics.refused.load(ordering: .relaxed)
        guard failed == 0 else { throw ValidationError("\(failed) appends failed while filling") }
        return (Double(MonotonicClock.nanoseconds() - started) / 1e9, ArchiveCommand.cpuSeconds() - cpuBefore)
    }
}

/// Who sends what to whom in `imbench history`'s archive, from the message's index alone.
struct HistoryPlan: Sendable {
    let messages: Int
    let users: Int
    let heavy: Int
    let days: Int
    let now: UInt64

    /// Users 0..<heavy have 1,000 contacts; the others are normal.
    func normalUser(_ index: Int) -> Int { heavy + index }

    func name(_ user: Int) -> String { "h\(user)" }

    /// A normal user's `k`th contact, never itself. The 0th, the best friend, is mutual
    /// (users pair up), so that their conversation gets both users' share.
    func contact(of user: Int, _ k: Int) -> Int {
        let normals = users - heavy
        if k == 0 {
            let partner = heavy + ((user - heavy) ^ 1)
            return partner < users ? partner : heavy
        }
        var mixer = SplitMix(seed: UInt64(user) &* 1_000_003 &+ UInt64(k))
        let offset = 1 + Int(mixer.next() % UInt64(normals - 1))
        return heavy + (user - heavy + offset) % normals
    }

    /// Who sends message `index` to whom (users by number).
    func participants(_ index: Int) -> (sender: Int, recipient: Int) {
        var mixer = SplitMix(seed: UInt64(index))
        return participants(index, &mixer)
    }

    /// Message `index`'s server time (Unix ms): the `days` before `now`, spread evenly.
    func time(_ index: Int) -> UInt64 {
        let span = UInt64(days) * 86_400_000
        return now - span + span * UInt64(index) / UInt64(messages)
    }

    /// The draws of `participants(_:)` from the message's own generator, which ``message(_:)``
    /// goes on drawing from.
    private func participants(_ index: Int, _ mixer: inout SplitMix) -> (sender: Int, recipient: Int) {
        if index % 10 == 0 {
            let heavyUser = Int(mixer.next() % UInt64(heavy))
            var contactMixer = SplitMix(seed: UInt64(heavyUser) << 32 | (mixer.next() % 1_000))
            let contact = heavy + Int(contactMixer.next() % UInt64(users - heavy))
            return mixer.next() % 2 == 0 ? (heavyUser, contact) : (contact, heavyUser)
        } else {
            let user = normalUser(Int(mixer.next() % UInt64(users - heavy)))
            let k = mixer.next() % 10 < 7 ? 0 : 1 + Int(mixer.next() % 9)
            let peer = contact(of: user, k)
            return mixer.next() % 2 == 0 ? (user, peer) : (peer, user)
        }
    }

    /// Message `index`: its sender, recipient and time.
    func message(_ index: Int) -> ArchiveMessage {
        var mixer = SplitMix(seed: UInt64(index))
        let (sender, recipient) = participants(index, &mixer)
        let time = self.time(index)
        let words = 20 + Int(mixer.next() % 80)
        let text = String(repeating: "w", count: words)
        let from = name(sender)
        let to = name(recipient)
        let id = "m\(index)"
        let body = Array("{\"from\":\"\(from)\",\"id\":\"\(id)\",\"text\":\"\(text)\",\"time\":\(time),\"to\":\"\(to)\",\"type\":\"text\"}".utf8)
        return ArchiveMessage(
            sender: from, messageID: id, fingerprint: UInt64(index), serverTime: time, body: body,
            copies: [
                ArchiveMessage.Copy(stream: to, conversation: .user(from)),
                ArchiveMessage.Copy(stream: from, origin: "phone", conversation: .user(to)),
            ])
    }
}

/// A small, fast, seeded generator (SplitMix64), so that a run can be repeated.
struct SplitMix: RandomNumberGenerator, Sendable {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1334_11EB
        return z ^ (z >> 31)
    }
}
