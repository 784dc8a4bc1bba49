import Dispatch
import GRDB
import Logging
import Synchronization

/// Copies the SQLite archive's WAL back into its file without holding the writer: SQLite's
/// automatic checkpoint copies the whole WAL inside the commit that crosses its threshold,
/// and that commit, with every chat waiting on it, waits for as long as it takes.
///
/// Every ``interval`` while commits come (and once after the last), a PASSIVE checkpoint on a
/// connection and a thread of its own copies what the WAL holds, while commits go on. The WAL starts over only at a commit that finds
/// it entirely copied, which commits made during the copy prevent; so once the WAL is past
/// ``restartFrames``, the writer, after its next commit, copies the few frames committed
/// since (``finish(on:)``), and the commit after that starts the WAL over: the WAL stays short
/// and is written over, in pages the kernel holds, instead of growing. Should the WAL grow all the
/// same (a reader holding an old snapshot), past ``truncateFrames`` a TRUNCATE checkpoint
/// waits for the writer and empties it: a pause for the chats, instead of a WAL without end.
final class WALCheckpointer: Sendable {
    /// Time between checkpoints.
    static let interval: DispatchTimeInterval = .milliseconds(50)
    /// WAL frames (pages) past which the writer finishes a checkpoint between its commits.
    static let restartFrames = 1_000
    /// Frames committed during a checkpoint that are few enough for the writer to copy.
    static let finishFrames = 64
    /// WAL frames past which a checkpoint waits for the writer to empty the WAL (256 MB of
    /// 4 KiB pages). Well above what one commit writes: a commit of 8,192 messages over 100,000
    /// users dirties about 26,000 pages, and a limit below that emptied the WAL after every one.
    static let truncateFrames = 65_536

    private let connection: DatabaseQueue
    private let queue = DispatchQueue(label: "imgw-archive-checkpoint")
    private let stopped = Mutex(false)
    /// Set by a checkpoint that copied a WAL past ``restartFrames``.
    private let finishWanted = Atomic(false)
    /// Checkpoints the writer finished (each lets the WAL start over).
    let finished = Atomic(0)
    /// TRUNCATE checkpoints (each held the writer).
    let truncated = Atomic(0)
    /// Checkpoints skipped because the writer was finishing one at the same moment.
    let overlapped = Atomic(0)
    /// Whether the last checkpoint failed (logged once, and again when one works).
    private let failing = Mutex(false)
    private let logger = Logger(label: "imgw.archive")

    /// Whether the timer runs: from a commit until an interval without one (an idle archive
    /// wakes no thread).
    private let running = Atomic(false)
    /// Commits since the timer last looked.
    private let commits = Atomic(0)
    /// Checkpoints the timer ran.
    let runs = Atomic(0)
    /// Whether the timer runs now.
    var isRunning: Bool { running.load(ordering: .acquiring) }

    /// Opens a connection of its own to `path`; checkpoints start with the first commit
    /// (``committed()``).
    init(path: String, configuration: Configuration) throws {
        var configuration = configuration
        configuration.label = "imgw-archive-checkpoint"
        connection = try DatabaseQueue(path: path, configuration: configuration)
    }

    /// After a write to the file: starts the timer if it is not running.
    func committed() {
        commits.add(1, ordering: .relaxed)
        guard !running.load(ordering: .relaxed) else { return }
        if running.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged { schedule() }
    }

    /// A checkpoint after ``interval``, and another after that while commits came meanwhile;
    /// the checkpoint that finds none was the last (it copied what the last commits left).
    private func schedule() {
        queue.asyncAfter(deadline: .now() + Self.interval) { [self] in
            guard !stopped.withLock({ $0 }) else { return }
            checkpoint()
            runs.add(1, ordering: .relaxed)
            if commits.exchange(0, ordering: .acquiringAndReleasing) > 0 { return schedule() }
            running.store(false, ordering: .releasing)
            // A commit between the exchange and the store found the timer running and left it.
            if commits.load(ordering: .acquiring) > 0,
                running.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
            {
                schedule()
            }
        }
    }

    /// One checkpoint: PASSIVE, or TRUNCATE when the WAL is too long.
    func checkpoint() {
        do {
            try connection.writeWithoutTransaction { db in
                var (frames, copied): (Int, Int)
                do {
                    (frames, copied) = try db.checkpoint(.passive)
                } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY {
                    // The writer is finishing a checkpoint (``finish(on:)``): one runs at a time,
                    // and that one copies what this one would have. Not a failure.
                    overlapped.add(1, ordering: .relaxed)
                    return
                }
                if frames > Self.truncateFrames {
                    logger.notice("the archive's WAL is long: emptying it, commits wait meanwhile", metadata: ["wal-pages": "\(frames)"])
                    _ = try db.checkpoint(.truncate)
                    truncated.add(1, ordering: .relaxed)
                } else if frames >= Self.restartFrames {
                    // Again, for what was committed during the copy (or not copied: a commit
                    // under way holds its snapshot's frames), while that is much: the writer's
                    // part (``finish(on:)``) must be short.
                    for _ in 0..<4 where frames - copied >= Self.finishFrames {
                        (frames, copied) = try db.checkpoint(.passive)
                    }
                    finishWanted.store(true, ordering: .relaxed)
                }
            }
            let wasFailing = failing.withLock { failing in
                defer { failing = false }
                return failing
            }
            if wasFailing { logger.notice("archive checkpoints work again") }
        } catch {
            let wasFailing = failing.withLock { failing in
                defer { failing = true }
                return failing
            }
            if !wasFailing {
                logger.warning("archive checkpoint failed: the WAL grows until one works", metadata: ["error": "\(error)"])
            }
        }
    }

    /// On the writer's thread, between commits: copies what was committed since the last
    /// checkpoint, if it asked for that, so that the next commit starts the WAL over.
    func finish(on pool: DatabasePool) {
        guard finishWanted.exchange(false, ordering: .relaxed) else { return }
        if (try? pool.writeWithoutTransaction({ db in try db.checkpoint(.passive) })) != nil {
            finished.add(1, ordering: .relaxed)
        } else {
            // The checkpointer's own copy was under way (one checkpoint at a time): after the
            // next commit, again.
            finishWanted.store(true, ordering: .relaxed)
        }
    }

    /// Stops checkpointing (what is left in the WAL is copied when the last connection to
    /// the file closes), and waits for a checkpoint under way.
    func stop() {
        stopped.withLock { $0 = true }
        queue.sync {}
        try? connection.close()
    }
}
