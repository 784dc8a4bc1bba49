import AsyncToolkit
import Dispatch
import Foundation
import Logging
import NIOCore
import Synchronization

/// The gateway's message archive: every chat it accepts is stored here before the sender's
/// ACK, with an offset per recipient stream, and every device catches up from here after
/// whatever the broker lost.
///
/// **Group commit.** ``append(_:completion:)`` queues a message; one writer task commits
/// what waits, up to ``Settings/maxBatch`` messages (and every device position saved
/// meanwhile) per transaction, and tells each waiter its outcome once the transaction has
/// committed. A message waits for at most the commit before its own and its own: under load
/// the batches grow, when idle each message commits alone.
///
/// **When the store fails** (a disk full or unwritable, PostgreSQL down or slow): the batch's
/// waiters are told ``ArchiveError/Code/unavailable`` with a time to retry, and new messages
/// are refused at once with the time left, without touching the store, until it has passed
/// (1 s, doubling up to 8 s while failures go on). Then the next commit tries the store
/// again; the first success ends it. A commit that takes longer than
/// ``Settings/writeTimeout`` counts as failed: its waiters are told so at once (if it commits
/// after all, a resend of its messages is found and ACKed as a duplicate). Nothing is ever
/// reported stored that was not committed.
///
/// **Retention**: messages accepted more than ``Settings/retention`` ago are deleted in
/// batches of ``Settings/retentionBatch``, one short transaction each.
public final class MessageArchive: Sendable {
    /// Group commit, time limits and retention.
    public struct Settings: Sendable, Hashable {
        /// Messages per transaction at most.
        public var maxBatch: Int
        /// How long the writer waits, once something is queued while it was idle, for more to
        /// commit with it: every commit writes the pages it changed (a few per stream and
        /// index), so small commits cost far more per message than large ones. A message
        /// waits at most this plus the commit before its own and its own.
        public var commitDelay: Duration
        /// How long a saved position waits for a message to commit with before it commits on
        /// its own (when the session ends, it does not wait).
        public var positionDelay: Duration
        /// How long a commit may take before its messages are refused.
        public var writeTimeout: Duration
        /// How long a read (catching a device up) may take before it is given up.
        public var readTimeout: Duration
        /// How long messages are kept; `nil`: for ever.
        public var retention: Duration?
        /// Messages deleted per retention transaction (and entries per transaction of the cap
        /// per conversation): each holds a SQLite archive's writer, and chats wait for it.
        public var retentionBatch: Int
        /// The share of the time retention and the cap per conversation may take while chats
        /// are being committed (``RetentionPacer``); when nothing else is written they go on
        /// after a short pause.
        public var retentionShare: Double
        /// How often retention looks for old messages (and the cap per conversation for
        /// conversations over it).
        public var retentionInterval: Duration
        /// Messages kept per conversation in each user's stream at most (the oldest beyond go
        /// at the next sweep); `nil`: no cap. A conversation is looked at once a message was
        /// stored in it since this archive started.
        public var maxPerConversation: Int?

        /// Settings; the defaults are `archive`'s in config/imgw.yaml.
        public init(
            maxBatch: Int = 512, commitDelay: Duration = .microseconds(500), positionDelay: Duration = .seconds(1),
            writeTimeout: Duration = .seconds(5), readTimeout: Duration = .seconds(5),
            retention: Duration? = .seconds(30 * 86_400), retentionBatch: Int = 200, retentionInterval: Duration = .seconds(60),
            maxPerConversation: Int? = nil, retentionShare: Double = 0.02
        ) {
            self.retentionShare = retentionShare
            self.maxBatch = maxBatch
            self.commitDelay = commitDelay
            self.positionDelay = positionDelay
            self.writeTimeout = writeTimeout
            self.readTimeout = readTimeout
            self.retention = retention
            self.retentionBatch = retentionBatch
            self.retentionInterval = retentionInterval
            self.maxPerConversation = maxPerConversation
        }
    }

    /// Told the outcome of an append, once, on the writer's task (or at once, when refused).
    public typealias Completion = @Sendable (Result<AppendOutcome, ArchiveError>) -> Void

    /// Where the messages are.
    public let store: any ArchiveStore
    public let settings: Settings
    /// Counters for the metrics endpoint.
    public let statistics = ArchiveStatistics()
    private let logger: Logger
    private let state = Mutex(State())
    /// What logins read, kept from this archive's writes; `nil` unless the store is
    /// written by this gateway alone.
    private let known: Mutex<KnownBounds>?

    private struct State: ~Copyable {
        var queue = GroupCommitQueue<Completion>()
        var availability = ArchiveAvailability()
        /// The writer, waiting for work.
        var writer: CheckedContinuation<Void, Never>?
        /// The commit under way: when it started and whom it will tell (the watchdog tells
        /// them instead when it takes too long).
        var inFlight: (started: UInt64, waiters: [Completion], timedOut: Bool)?
        /// ``run()`` was cancelled: the writer commits what waits, then stops.
        var stopping = false
        /// The writer has stopped: appends are refused.
        var closed = false
        /// A blocking store's writer (``ArchiveStore/blockingCommit``): started by ``run()``,
        /// and a drain of the queue is scheduled on ``writerQueue`` or running.
        var blockingStarted = false
        var drainScheduled = false
        /// The positions that wait commit with the next batch even without a message (their
        /// ``Settings/positionDelay`` has passed, or a session ended).
        var positionsDue = false
        /// A timer will make the positions due.
        var positionTimer = false
        /// ``run()``, waiting for a blocking store's writer to stop.
        var stopped: CheckedContinuation<Void, Never>?
        /// Conversations a message was stored in since the last sweep of the cap per
        /// conversation (only with ``Settings/maxPerConversation``).
        var touched = Set<TrimmedConversation>()
    }

    /// A conversation of a stream, for the cap per conversation.
    struct TrimmedConversation: Hashable {
        var stream: String
        var conversation: Conversation
    }

    /// Where a blocking store's commits run, one at a time.
    private let writerQueue = DispatchQueue(label: "imgw-archive-writer")

    /// The store's epoch.
    public var epoch: ArchiveEpoch { store.epoch }

    /// An archive over `store`. Nothing is committed until ``run()``.
    public init(store: any ArchiveStore, settings: Settings = Settings(), logger: Logger) {
        self.store = store
        self.settings = settings
        self.logger = logger
        self.known = store.isSoleWriter ? Mutex(KnownBounds()) : nil
    }

    // MARK: Writing

    /// Queues `message` for the next commit; `completion` is told its outcome once that has
    /// committed (or failed). Refused at once, with a time to retry, while the store is
    /// unavailable.
    public func append(_ message: ArchiveMessage, completion: @escaping Completion) {
        let now = Self.now()
        let refusal: ArchiveError?
        let writer: CheckedContinuation<Void, Never>?
        var scheduleDrain = false
        (refusal, writer) = state.withLock { state in
            if state.closed { return (ArchiveError(.closed, "the archive is closed"), nil) }
            if let refused = state.availability.refusal(now: now) {
                return (.unavailable("the message archive is unavailable: \(refused.reason)", retryAfter: refused.retryAfter), nil)
            }
            // A commit that timed out and has not ended yet holds the writer: what would queue
            // behind it would wait for it, untold.
            if state.inFlight?.timedOut == true {
                return (.unavailable("the message archive is unavailable: a commit has not ended for \(settings.writeTimeout) or more", retryAfter: 1_000), nil)
            }
            state.queue.append(message, waiter: completion)
            scheduleDrain = Self.claimDrain(&state)
            defer { state.writer = nil }
            return (nil, state.writer)
        }
        if let refusal {
            statistics.refused.add(1, ordering: .relaxed)
            completion(.failure(refusal))
        }
        writer?.resume()
        if scheduleDrain { scheduleDrainAfterDelay() }
    }

    /// Stores `message`; returns once committed.
    public func append(_ message: ArchiveMessage) async throws(ArchiveError) -> AppendOutcome {
        let result = await withCheckedContinuation { continuation in
            append(message) { continuation.resume(returning: $0) }
        }
        return try result.get()
    }

    /// Saves a device's position with the next commit of a message, or after
    /// ``Settings/positionDelay`` (at once, that is after ``Settings/commitDelay``, when
    /// `promptly`: a session that ends). A later save of the same device replaces it; a
    /// position never moves back. A position lost to a failure is saved with the next commit
    /// that succeeds; one lost to a crash costs the device repeats, which it de-duplicates.
    public func savePosition(_ position: DevicePosition, promptly: Bool = false) {
        var scheduleDrain = false
        var scheduleTimer = false
        let writer = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.closed else { return nil }
            state.queue.save(position)
            guard promptly else {
                scheduleTimer = !state.positionTimer && !state.positionsDue
                if scheduleTimer { state.positionTimer = true }
                return nil
            }
            state.positionsDue = true
            scheduleDrain = Self.claimDrain(&state)
            defer { state.writer = nil }
            return state.writer
        }
        writer?.resume()
        if scheduleDrain { scheduleDrainAfterDelay() }
        if scheduleTimer {
            writerQueue.asyncAfter(deadline: .now() + Self.dispatchInterval(settings.positionDelay)) { self.positionsNowDue() }
        }
    }

    /// The positions' timer: they commit now, with or without a message.
    private func positionsNowDue() {
        var scheduleDrain = false
        let writer = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.positionTimer = false
            guard !state.closed, state.queue.hasPositions else { return nil }
            state.positionsDue = true
            scheduleDrain = Self.claimDrain(&state)
            defer { state.writer = nil }
            return state.writer
        }
        writer?.resume()
        if scheduleDrain { writerQueue.async { self.drain() } }
    }

    /// Whether the caller is to schedule a drain of a blocking store's writer (none is).
    private static func claimDrain(_ state: inout State) -> Bool {
        guard state.blockingStarted && !state.drainScheduled else { return false }
        state.drainScheduled = true
        return true
    }

    /// Whether a batch is to be committed now: messages wait, or positions that are due (or
    /// the archive is stopping).
    private static func hasWork(_ state: borrowing State) -> Bool {
        state.queue.count > 0 || (state.queue.hasPositions && (state.positionsDue || state.stopping))
    }

    static func dispatchInterval(_ duration: Duration) -> DispatchTimeInterval {
        let components = duration.components
        return .nanoseconds(Int(components.seconds) * 1_000_000_000 + Int(components.attoseconds / 1_000_000_000))
    }

    /// Whether the store takes writes now (the metric `imgw_archive_available`).
    public var isAvailable: Bool { state.withLock { $0.availability.isAvailable } }

    /// Messages waiting for a commit.
    public var queued: Int { state.withLock { $0.queue.count } }

    // MARK: Reading

    /// The entries of `stream` after `after`, at most `through`, oldest first, at most
    /// `limit`. Throws ``ArchiveError/Code/unavailable`` when the store cannot answer in
    /// ``Settings/readTimeout``.
    public func read(stream: String, after: UInt64, through: UInt64 = .max, limit: Int) async throws(ArchiveError) -> [StoredEntry] {
        let store = self.store
        return try await reading("read \(stream)") { try await store.read(stream: stream, after: after, through: through, limit: limit) }
    }

    /// What `stream` holds (from memory when this gateway's writes tell it: ``KnownBounds``).
    public func bounds(of stream: String) async throws(ArchiveError) -> StreamBounds {
        // One look: what memory knows, or the generation the read starts at.
        let (generation, remembered) = known?.withLock { ($0.generation, $0.bounds(of: stream)) } ?? (nil, nil)
        if let remembered {
            statistics.boundsFromMemory.add(1, ordering: .relaxed)
            return remembered
        }
        let store = self.store
        let bounds = try await reading("bounds of \(stream)") { try await store.bounds(of: stream) }
        if let generation { known?.withLock { $0.read(bounds, of: stream, since: generation) } }
        return bounds
    }

    /// The saved position of a device (from memory when this gateway's writes tell it).
    public func position(user: String, device: String) async throws(ArchiveError) -> UInt64? {
        let (generation, remembered) = known?.withLock { ($0.generation, $0.position(user: user, device: device)) } ?? (nil, nil)
        if let remembered { return remembered }
        let store = self.store
        let position = try await reading("position of \(user)/\(device)") { try await store.position(user: user, device: device) }
        if let generation { known?.withLock { $0.read(position: position, user: user, device: device, since: generation) } }
        return position
    }

    /// A page of `conversation`'s history in `stream` (``ArchiveStore/history(stream:conversation:position:limit:)``).
    public func history(stream: String, conversation: Conversation, position: HistoryPosition, limit: Int) async throws(ArchiveError) -> HistoryPage {
        let store = self.store
        return try await reading("history of \(conversation) for \(stream)") {
            try await store.history(stream: stream, conversation: conversation, position: position, limit: limit)
        }
    }

    /// A page of `user`'s conversation list (``ArchiveStore/conversations(user:before:limit:)``).
    public func conversations(user: String, before: UInt64?, limit: Int) async throws(ArchiveError) -> ConversationPage {
        let store = self.store
        return try await reading("conversations of \(user)") { try await store.conversations(user: user, before: before, limit: limit) }
    }

    /// Marks `conversation` read by `user` up to `through` (``ArchiveStore/markRead(user:conversation:through:)``).
    public func markRead(user: String, conversation: Conversation, through: UInt64) async throws(ArchiveError) -> ReadMarkOutcome {
        let store = self.store
        return try await reading("read marker of \(conversation) for \(user)") {
            try await store.markRead(user: user, conversation: conversation, through: through)
        }
    }

    /// Deletes a message for everyone (``ArchiveStore/deleteMessage(sender:messageID:at:origin:tombstone:)``).
    public func deleteMessage(sender: String, messageID: String, at time: UInt64, origin: String?, tombstone: @escaping @Sendable (_ body: [UInt8]) -> [UInt8]) async throws(ArchiveError) -> DeletedMessage? {
        let store = self.store
        let deleted = try await reading("delete \(messageID) of \(sender)") {
            try await store.deleteMessage(sender: sender, messageID: messageID, at: time, origin: origin, tombstone: tombstone)
        }
        if let deleted, deleted.first {
            known?.withLock { known in for copy in deleted.tombstones { known.appended(copy.offset, to: copy.stream) } }
        }
        return deleted
    }

    /// Erases what the archive holds of `user` (``ArchiveStore/eraseUser(_:at:tombstone:)``).
    public func eraseUser(_ user: String, at time: UInt64, tombstone: @escaping @Sendable (_ body: [UInt8]) -> [UInt8]) async throws(ArchiveError) -> UserErasure {
        let store = self.store
        defer { known?.withLock { $0.erased(user) } }
        return try await reading("erase \(user)") { try await store.eraseUser(user, at: time, tombstone: tombstone) }
    }

    /// The members of `group`, or `nil` when the archive has no record of it
    /// (``ArchiveStore/groupMembers(_:)``).
    public func groupMembers(_ group: String) async throws(ArchiveError) -> [String: UInt64]? {
        let store = self.store
        return try await reading("members of group \(group)") { try await store.groupMembers(group) }
    }

    /// Records changes of `group`'s membership (a user added since a time, or removed: `nil`),
    /// committed when this returns. Throws ``ArchiveError/Code/unavailable`` when the store
    /// cannot take them in ``Settings/readTimeout``.
    public func recordGroupMembers(_ group: String, _ changes: [String: UInt64?]) async throws(ArchiveError) {
        let store = self.store
        try await reading("record members of group \(group)") { try await store.recordGroupMembers(group, changes) }
    }

    private func reading<T: Sendable>(_ what: String, _ body: @escaping @Sendable () async throws -> T) async throws(ArchiveError) -> T {
        switch await Self.within(settings.readTimeout, body) {
        case .success(let value):
            return value
        case .failure(let error):
            statistics.readFailures.add(1, ordering: .relaxed)
            if let error = error as? ArchiveError { throw error }
            throw .unavailable("the message archive could not be read (\(what)): \(error)", retryAfter: 1_000)
        }
    }

    /// `body`'s result, or after `limit` an ``ArchiveError/Code/unavailable`` with a time to
    /// retry (`body` goes on, unobserved).
    static func within<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async -> Result<T, any Error> {
        let outcome = AsyncCondition<Result<T, any Error>?>(nil)
        Task {
            let result: Result<T, any Error>
            do { result = .success(try await body()) } catch { result = .failure(error) }
            outcome.withLock { $0 = $0 ?? result }
        }
        // Whichever settles it first answers; not cancellable, as the body or the time limit
        // always does.
        let timer = Task {
            // Cancelled: the body answered (a cancelled sleep returns at once, and must not
            // be taken for the time having passed).
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            outcome.withLock { $0 = $0 ?? .failure(ArchiveError.unavailable("no answer within \(limit)", retryAfter: 1_000)) }
        }
        let result = await outcome.waitIgnoringCancellation { $0 }
        timer.cancel()
        return result
    }

    // MARK: The writer

    /// Commits what is appended until cancelled, then commits what still waits, closes the
    /// store and returns. Also runs retention and the commit watchdog.
    public func run() async {
        let blocking = store.blockingCommit != nil
        // The writer is not cancelled with this task: it commits what waits first (GRDB and
        // postgres-nio give up on a cancelled task's work).
        let writer = Task {
            if blocking { await self.writeBlocking() } else { await self.write() }
        }
        await withTaskCancellationHandler {
            await withDiscardingTaskGroup { group in
                group.addTask { await self.watchdog() }
                if settings.retention != nil { group.addTask { await self.retain() } }
                if settings.maxPerConversation != nil { group.addTask { await self.capConversations() } }
                await writer.value
                group.cancelAll()
            }
        } onCancel: {
            let (writer, drain) = state.withLock { state in
                state.stopping = true
                defer { state.writer = nil }
                let drain = state.blockingStarted && !state.drainScheduled
                if drain { state.drainScheduled = true }
                return (state.writer, drain)
            }
            writer?.resume()
            if drain { writerQueue.async { self.drain() } }
        }
        await store.close()
        let commits = statistics.commits.load(ordering: .relaxed)
        logger.notice("message archive closed", metadata: [
            "archive": "\(store.description)", "stored": "\(statistics.stored.load(ordering: .relaxed))", "commits": "\(commits)",
            "commit-ms": "\(commits > 0 ? statistics.commitNanoseconds.load(ordering: .relaxed) / commits / 1_000 : 0) µs mean",
        ])
    }

    /// Schedules a drain once ``Settings/commitDelay`` has passed (at once without one).
    private func scheduleDrainAfterDelay() {
        if settings.commitDelay > .zero {
            writerQueue.asyncAfter(deadline: .now() + Self.dispatchInterval(settings.commitDelay)) { self.drain() }
        } else {
            writerQueue.async { self.drain() }
        }
    }

    /// A blocking store's writer: drains run on ``writerQueue`` as appends schedule them;
    /// returns once stopping has left nothing to commit.
    private func writeBlocking() async {
        await withCheckedContinuation { continuation in
            let drain = state.withLock { state -> Bool in
                state.stopped = continuation
                state.blockingStarted = true
                guard !state.drainScheduled else { return false }
                state.drainScheduled = true
                return true
            }
            if drain { writerQueue.async { self.drain() } }
        }
    }

    /// Commits batches until nothing waits (on ``writerQueue``); after a failure, comes back
    /// at the retry time; stopping with nothing left, lets ``run()`` go on.
    private func drain() {
        guard let commit = store.blockingCommit else { return }
        while true {
            let now = Self.now()
            let next = next(now: now) { state in
                // Nothing waits: the next append schedules a drain.
                state.drainScheduled = false
                return .done
            }
            switch next {
            case .batch(let batch):
                let started = Self.now()
                state.withLock { $0.inFlight = (started, batch.waiters, false) }
                let result: Result<[AppendOutcome], any Error>
                do { result = .success(try commit(batch.messages, batch.positions)) } catch { result = .failure(error) }
                finish(batch, result, started: started)
                // Under commits without pause too (the writer may never be idle).
                store.blockingBetweenCommits?()
            case .wait(let until):
                writerQueue.asyncAfter(deadline: .now() + .nanoseconds(Int(min(until ?? now, UInt64(Int.max)) - now))) { self.drain() }
                return
            case .done:
                if let stopped = state.withLock({ state in state.closed ? state.stopped.take() : nil }) {
                    stopped.resume()
                }
                return
            }
        }
    }

    private func write() async {
        while let batch = await nextBatch() {
            await commit(batch)
        }
    }

    private enum Next {
        case batch(GroupCommitQueue<Completion>.Batch)
        case wait(until: UInt64?)
        case done
    }

    /// What the writer does next at `now`: wait for the retry time after a failure (what waits
    /// then are positions, and messages queued before it), commit a batch, close once stopping
    /// with nothing left, or else what `idle` says.
    private func next(now: UInt64, idle: (inout State) -> Next) -> Next {
        state.withLock { state -> Next in
            if case .unavailable(let until, _, _) = state.availability.state, now < until, !state.stopping {
                return .wait(until: until)
            }
            if Self.hasWork(state) {
                state.positionsDue = false
                return .batch(state.queue.take(maxBatch: settings.maxBatch))
            }
            if state.stopping {
                state.closed = true
                return .done
            }
            return idle(&state)
        }
    }

    /// The next batch, once there is one; `nil` once stopping with nothing left.
    private func nextBatch() async -> GroupCommitQueue<Completion>.Batch? {
        while true {
            let now = Self.now()
            let next = next(now: now) { _ in .wait(until: nil) }
            switch next {
            case .batch(let batch):
                return batch
            case .done:
                return nil
            case .wait(let until?):
                try? await Task.sleep(for: .nanoseconds(Int64(until - now)))
            case .wait(nil):
                await withCheckedContinuation { continuation in
                    let ready = state.withLock { state in
                        guard !Self.hasWork(state), !state.stopping else { return true }
                        state.writer = continuation
                        return false
                    }
                    if ready { continuation.resume() }
                }
                // Woken from idle: what comes within the delay commits with it.
                if settings.commitDelay > .zero { try? await Task.sleep(for: settings.commitDelay) }
            }
        }
    }

    private func commit(_ batch: GroupCommitQueue<Completion>.Batch) async {
        let started = Self.now()
        state.withLock { $0.inFlight = (started, batch.waiters, false) }
        let result: Result<[AppendOutcome], any Error>
        do {
            result = .success(try await store.commit(batch.messages, positions: batch.positions))
        } catch {
            result = .failure(error)
        }
        finish(batch, result, started: started)
    }

    /// Tells a commit's waiters its outcome (unless the watchdog did), counts it, and marks
    /// the store available or not.
    private func finish(_ batch: GroupCommitQueue<Completion>.Batch, _ result: Result<[AppendOutcome], any Error>, started: UInt64) {
        let finished = Self.now()
        let told = state.withLock { state -> Bool in
            defer { state.inFlight = nil }
            return state.inFlight?.timedOut ?? false
        }
        switch result {
        case .success(let outcomes):
            statistics.recordCommit(messages: batch.messages.count, nanoseconds: finished - started)
            for outcome in outcomes {
                switch outcome {
                case .stored: statistics.stored.add(1, ordering: .relaxed)
                case .duplicate: statistics.duplicates.add(1, ordering: .relaxed)
                case .reused: statistics.reused.add(1, ordering: .relaxed)
                }
            }
            statistics.positionsSaved.add(batch.positions.count, ordering: .relaxed)
            known?.withLock { known in
                for (message, outcome) in zip(batch.messages, outcomes) {
                    guard case .stored(let offsets) = outcome else { continue }
                    for (copy, offset) in zip(message.copies, offsets) { known.appended(offset, to: copy.stream) }
                }
                for position in batch.positions { known.saved(position) }
            }
            if settings.maxPerConversation != nil {
                var touched: [TrimmedConversation] = []
                for (message, outcome) in zip(batch.messages, outcomes) {
                    guard case .stored = outcome else { continue }
                    for copy in message.copies {
                        if let conversation = copy.conversation { touched.append(TrimmedConversation(stream: copy.stream, conversation: conversation)) }
                    }
                }
                state.withLock { $0.touched.formUnion(touched) }
            }
            if state.withLock({ $0.availability.succeeded() }) {
                statistics.available.store(true, ordering: .relaxed)
                logger.notice("the message archive takes messages again", metadata: ["archive": "\(store.description)"])
            }
            if !told {
                for (waiter, outcome) in zip(batch.waiters, outcomes) { waiter(.success(outcome)) }
            }
        case .failure(let error):
            let retry = failed((error as? ArchiveError)?.message ?? "\(error)", at: finished)
            // The positions are saved with a later commit (unless the archive is stopping).
            state.withLock { state in
                guard !state.stopping else { return }
                for position in batch.positions { state.queue.save(position) }
            }
            if !told {
                let refusal = ArchiveError.unavailable(
                    "the message archive could not store it: \((error as? ArchiveError)?.message ?? "\(error)")", retryAfter: retry)
                statistics.refused.add(batch.waiters.count, ordering: .relaxed)
                for waiter in batch.waiters { waiter(.failure(refusal)) }
            }
        }
    }

    /// Marks the store unavailable after a failed (or too slow) commit; returns the time
    /// to retry, in milliseconds.
    private func failed(_ reason: String, at now: UInt64) -> UInt32 {
        statistics.failedCommits.add(1, ordering: .relaxed)
        statistics.available.store(false, ordering: .relaxed)
        let (retry, first) = state.withLock { $0.availability.failed(now: now, reason: reason) }
        if first {
            logger.error(
                "the message archive cannot store messages: chats are refused until it can",
                metadata: ["archive": "\(store.description)", "error": "\(reason)", "retry-in-ms": "\(retry)"])
        } else {
            logger.warning(
                "the message archive still cannot store messages",
                metadata: ["archive": "\(store.description)", "error": "\(reason)", "retry-in-ms": "\(retry)"])
        }
        return retry
    }

    /// Tells the waiters of a commit that takes longer than ``Settings/writeTimeout`` that
    /// it failed, and refuses new messages, without waiting for the commit to end.
    private func watchdog() async {
        let limit = UInt64(settings.writeTimeout.components.seconds) * 1_000_000_000
            + UInt64(settings.writeTimeout.components.attoseconds / 1_000_000_000)
        while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(100))
            let now = Self.now()
            let late = state.withLock { state -> [Completion]? in
                guard let inFlight = state.inFlight, !inFlight.timedOut, Self.isLate(started: inFlight.started, now: now, limit: limit) else {
                    return nil
                }
                state.inFlight?.timedOut = true
                // And what queued behind it: it would wait for the stuck commit, untold.
                return inFlight.waiters + state.queue.drainMessages()
            }
            guard let late else { continue }
            let retry = failed("a commit took longer than \(settings.writeTimeout)", at: now)
            let refusal = ArchiveError.unavailable(
                "the message archive did not store it within \(settings.writeTimeout)", retryAfter: retry)
            statistics.refused.add(late.count, ordering: .relaxed)
            for waiter in late { waiter(.failure(refusal)) }
        }
    }

    /// Whether a commit that started at `started` has run longer than `limit` at `now`. A
    /// commit that started after `now` was read (on another thread) is not late.
    static func isLate(started: UInt64, now: UInt64, limit: UInt64) -> Bool {
        now > started && now - started > limit
    }

    /// Deletes what is older than the retention, in short transactions, now and then.
    private func retain() async {
        guard let retention = settings.retention else { return }
        let keep = UInt64(retention.components.seconds) * 1_000
        while !Task.isCancelled {
            var deleted = 0
            var pacer = RetentionPacer(share: settings.retentionShare)
            while !Task.isCancelled {
                let cutoff = UInt64(Self.wallMilliseconds()) &- keep
                let started = Self.now()
                let count: Int
                do {
                    count = try await store.deleteMessages(acceptedBefore: cutoff, limit: settings.retentionBatch)
                } catch where Task.isCancelled {
                    return
                } catch {
                    logger.notice("retention could not delete old messages; trying again later", metadata: ["error": "\(error)"])
                    break
                }
                deleted += count
                statistics.deleted.add(count, ordering: .relaxed)
                if count > 0 { known?.withLock { $0.deleted() } }
                if count < settings.retentionBatch { break }
                try? await Task.sleep(for: pacer.pause(after: Self.now() - started, commits: statistics.commits.load(ordering: .relaxed)))
            }
            if deleted > 0 {
                logger.info("retention deleted old messages", metadata: ["messages": "\(deleted)", "retention": "\(retention)"])
            }
            try? await Task.sleep(for: settings.retentionInterval)
        }
    }

    /// Sweeps the conversations over ``Settings/maxPerConversation`` now and then.
    private func capConversations() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: settings.retentionInterval)
            guard !Task.isCancelled else { return }
            await trimConversations()
        }
    }

    /// One sweep of the cap per conversation: each conversation a message was stored in since
    /// the last sweep loses its entries beyond the newest ``Settings/maxPerConversation``,
    /// ``Settings/retentionBatch`` per short transaction. A conversation the store could not
    /// trim waits for the next sweep. Returns the entries deleted.
    @discardableResult
    public func trimConversations() async -> Int {
        guard let keep = settings.maxPerConversation else { return 0 }
        let touched = state.withLock { state in
            defer { state.touched = [] }
            return state.touched
        }
        var deleted = 0
        var failed: [TrimmedConversation] = []
        var pacer = RetentionPacer(share: settings.retentionShare)
        for item in touched.sorted(by: { ($0.stream, $0.conversation.key) < ($1.stream, $1.conversation.key) }) {
            do {
                while true {
                    let started = Self.now()
                    let count = try await store.trimConversation(
                        stream: item.stream, conversation: item.conversation, keep: keep, limit: settings.retentionBatch)
                    deleted += count
                    statistics.trimmed.add(count, ordering: .relaxed)
                    if count > 0 { known?.withLock { $0.deleted() } }
                    if count > 0 {
                        try? await Task.sleep(for: pacer.pause(after: Self.now() - started, commits: statistics.commits.load(ordering: .relaxed)))
                    }
                    if count < settings.retentionBatch { break }
                }
            } catch {
                if failed.isEmpty {
                    logger.notice("the cap per conversation could not delete old messages; trying again later", metadata: ["error": "\(error)"])
                }
                failed.append(item)
            }
        }
        if !failed.isEmpty { state.withLock { $0.touched.formUnion(failed) } }
        if deleted > 0 {
            logger.info("the cap per conversation deleted old messages", metadata: ["entries": "\(deleted)", "cap": "\(keep)"])
        }
        return deleted
    }

    static func now() -> UInt64 { NIODeadline.now().uptimeNanoseconds }

    static func wallMilliseconds() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1_000).rounded(.down))
    }
}

/// The archive's counters (the metrics endpoint exports them).
public final class ArchiveStatistics: Sendable {
    /// Messages stored.
    public let stored = Atomic<Int>(0)
    /// Messages found stored already (resends).
    public let duplicates = Atomic<Int>(0)
    /// Messages refused for an id used for another message.
    public let reused = Atomic<Int>(0)
    /// Messages refused because the store was unavailable (at once, or their commit failed).
    public let refused = Atomic<Int>(0)
    /// Transactions committed.
    public let commits = Atomic<Int>(0)
    /// Messages in those transactions.
    public let committedMessages = Atomic<Int>(0)
    /// Time spent committing, nanoseconds.
    public let commitNanoseconds = Atomic<Int>(0)
    /// Commits that failed or took too long.
    public let failedCommits = Atomic<Int>(0)
    /// Reads that failed or took too long.
    public let readFailures = Atomic<Int>(0)
    /// Device positions saved.
    public let positionsSaved = Atomic<Int>(0)
    /// Messages deleted by retention.
    public let deleted = Atomic<Int>(0)
    /// Entries deleted by the cap per conversation.
    public let trimmed = Atomic<Int>(0)
    /// Stream bounds a login took from memory (``KnownBounds``), not from the store.
    public let boundsFromMemory = Atomic<Int>(0)
    /// Whether the store takes writes.
    public let available = Atomic<Bool>(true)

    func recordCommit(messages: Int, nanoseconds: UInt64) {
        commits.add(1, ordering: .relaxed)
        committedMessages.add(messages, ordering: .relaxed)
        commitNanoseconds.add(Int(clamping: nanoseconds), ordering: .relaxed)
    }
}
