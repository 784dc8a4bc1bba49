import IMArchive
import IMWire
import NIOCore

/// Where a logged-in device is in its user's stream of stored messages, and what its
/// connection still owes it: the message archive's side of the connection's data path
/// (docs/PROTOCOL.md 6.14). Pure: the connection tells it what happens (pages read from the
/// archive, messages from the broker, the device's ACKs, its own chats stored, the time) and
/// does what it answers; it does no I/O and reads no clock.
///
/// - **Position.** Every offset up to ``position`` is done: the device ACKed it, or does not
///   need it (its own message, a carbon it declined, one deleted by retention). Offsets done
///   above it (ACKed out of order) wait in a set until the gap below them closes.
/// - **Catching up** (at login and on SYNC): the archive is read in pages of ``pageSize`` from
///   a position up to the stream's end as it was then; the next page is read once the device
///   has ACKed half of what it was given. Messages from the broker meanwhile are held, then
///   delivered or dropped as duplicates: nothing reaches the device twice, and nothing of a
///   conversation overtakes what came before it. **Once per connection:** every offset from
///   where the connection started (``coveredFrom``) up to ``position`` was given to the device
///   by this connection or needed no delivery, so a catch-up from an earlier position (a SYNC
///   sent right after LOGIN_OK, with the position LOGIN gave) skips them, however its reads and
///   the device's ACKs interleave.
/// - **Live**, a message from the broker is delivered in the order of the stream: unless its
///   offset is done or given already, and only once every offset below it is. One that comes
///   above a gap is held until the gap closes (normally at once: two gateways published in the
///   other order than they stored). A gap that stays open for ``gapRepairDelay`` (a message
///   the broker lost while the device stayed online, a sender's gateway that died between
///   storing and publishing, a carbon not published) is read from the archive; then what was
///   held follows. So a device never sees a message before one stored ahead of it in its
///   stream, and one conversation's messages arrive in the order they were sent.
struct StreamSync: Sendable {
    /// What to read from the archive.
    struct Read: Sendable, Hashable {
        /// Entries after this offset...
        var after: UInt64
        /// ... up to this one, ...
        var through: UInt64
        /// ... at most this many.
        var limit: Int
        /// A repair of a gap (rather than a catch-up).
        var isRepair: Bool = false
    }

    /// One entry of a page, as far as the sync is concerned.
    struct PageEntry: Sendable, Hashable {
        var offset: UInt64
        /// The device that sent it (the user's own copy), if any.
        var origin: String?
    }

    /// What to do with an entry of a page.
    enum PageDecision: Sendable, Hashable {
        /// Deliver it (with ARCHIVED).
        case deliver
        /// The device has it, or it is its own message: nothing.
        case skip
    }

    /// What to do with a message from the broker that carries an offset of this epoch.
    enum LiveDecision: Sendable, Hashable {
        /// Deliver it.
        case deliver
        /// The device has it (or was given it): acknowledge it to the broker and drop it.
        case duplicate
        /// Catching up: keep it until the catch-up is done, then ask again.
        case hold
    }

    enum Phase: Sendable, Hashable {
        /// Reading the archive; broker messages are held.
        case catchingUp
        /// Delivering as messages come.
        case live
    }

    /// Entries per read.
    static let pageSize = 128
    /// How long a gap below delivered offsets may stay open before the archive is read.
    static let gapRepairDelay: TimeAmount = .seconds(2)
    /// The most offsets kept above ``position``; past it the lowest gap is given up (the
    /// archive could not fill it), so that a connection's memory stays bounded.
    static let maxDoneAbove = 8_192

    /// The archive's epoch.
    let epoch: UInt64
    /// This device: its own copies are never delivered to it.
    let device: String
    /// Whether the device takes carbons (copies of what the user's other devices sent).
    let wantsCarbons: Bool
    private(set) var position: UInt64
    /// Where this connection started: every offset after it up to ``position`` was given by this
    /// connection, or needed no delivery (a catch-up from further back, once it has read past
    /// this, moves it back to its start).
    private(set) var coveredFrom: UInt64
    /// Where the catch-up under way started.
    private var catchUpFrom: UInt64 = 0
    private(set) var phase: Phase = .live
    /// Offsets done above ``position``.
    private var done: Set<UInt64> = []
    /// Offsets given to the device (queued or written) and not ACKed yet.
    private var given: Set<UInt64> = []
    /// Offsets of broker messages held above a gap.
    private var waiting: Set<UInt64> = []
    /// Whether live messages wait for the gaps below them: not after a read of the archive
    /// failed (an archive that is down must not stop what the broker has), again after one
    /// succeeds.
    private(set) var ordered = true
    /// Catch-up: read after this offset, up to ``through``.
    private(set) var cursor: UInt64 = 0
    private(set) var through: UInt64 = 0
    /// A read is under way.
    private(set) var reading = false
    /// The position last handed out to be saved; `nil`: the archive has none for the device.
    private(set) var saved: UInt64?
    /// Since when the lowest gap has been open.
    private(set) var gapSince: NIODeadline?
    /// Gaps given up (``maxDoneAbove``).
    private(set) var gapsGivenUp = 0

    /// A device at `position`, live (``catchUp(from:through:)`` starts catching up). `saved`:
    /// the position the archive already has for it (`nil`: none, so this one is to be saved).
    init(epoch: UInt64, device: String, wantsCarbons: Bool, position: UInt64, saved: UInt64?) {
        self.epoch = epoch
        self.device = device
        self.wantsCarbons = wantsCarbons
        self.position = position
        self.coveredFrom = position
        self.saved = saved
    }

    /// Whether the device was given everything up to the stream's end it knows of.
    var isLive: Bool { phase == .live }

    /// How many entries the device was given and has not ACKed.
    var unacknowledged: Int { given.count }

    // MARK: Catching up

    /// Starts catching up with what is stored after `from` (the position, unless a SYNC asked
    /// for an earlier one) up to `last`; returns the first read, or `nil` when there is
    /// nothing to read (still live). A `from` past the position moves the position there (the
    /// device says it has those).
    mutating func catchUp(from: UInt64? = nil, through last: UInt64) -> Read? {
        let start = from ?? position
        if start > position && start <= last {
            // The device says it has these: done, though this connection did not give them (a
            // later SYNC from before them gives them).
            markDone(position + 1...start)
            coveredFrom = max(coveredFrom, start)
        }
        guard last > start else { return nil }
        phase = .catchingUp
        cursor = start
        catchUpFrom = start
        through = max(through, last)
        return nextRead()
    }

    /// The next page to read while catching up, if one is due: none while a read is under
    /// way, or while the device holds half a page or more unACKed.
    mutating func nextRead() -> Read? {
        guard phase == .catchingUp, !reading, given.count < Self.pageSize / 2 else { return nil }
        guard cursor < through else {
            phase = .live
            return nil
        }
        reading = true
        return Read(after: cursor, through: through, limit: Self.pageSize)
    }

    /// A page came back for `read`: what to do with each of its entries, in order. Offsets of
    /// the range that did not come back were deleted (retention) and count as done. Once the
    /// catch-up has read up to ``through`` the sync is live again (``isLive``).
    mutating func pageRead(_ entries: [PageEntry], for read: Read) -> [PageDecision] {
        reading = false
        ordered = true
        var decisions: [PageDecision] = []
        decisions.reserveCapacity(entries.count)
        var next = read.after + 1
        for entry in entries {
            if entry.offset > next { markDone(next...(entry.offset - 1)) }
            next = max(next, entry.offset + 1)
            if given.contains(entry.offset) || done.contains(entry.offset) || (read.isRepair && entry.offset <= position)
                || (entry.offset > coveredFrom && entry.offset <= position) {
                decisions.append(.skip)
            } else if let origin = entry.origin, origin == device || !wantsCarbons {
                markDone(entry.offset...entry.offset)
                decisions.append(.skip)
            } else {
                given.insert(entry.offset)
                decisions.append(.deliver)
            }
        }
        // The rest of the range, when the page was not full, holds nothing.
        let reached = entries.count < read.limit ? read.through : (entries.last?.offset ?? read.through)
        if entries.count < read.limit, next <= read.through { markDone(next...read.through) }
        if read.isRepair {
            gapSince = nil
        } else {
            cursor = max(cursor, reached)
            // Everything from the catch-up's start to where this connection started has now
            // been given (or needed nothing).
            if reached >= coveredFrom { coveredFrom = min(coveredFrom, catchUpFrom) }
            if cursor >= through { phase = .live }
        }
        return decisions
    }

    /// A read failed: the catch-up (or repair) stops; live messages flow, gaps or not, until a
    /// read succeeds. The connection tries again later (``catchUp(from:through:)``).
    mutating func readFailed() {
        reading = false
        phase = .live
        gapSince = nil
        ordered = false
    }

    // MARK: Live

    /// A message from the broker at `offset` of this epoch: held while catching up, or while
    /// an offset below it is neither done nor given (``canRelease`` says when to ask again).
    mutating func live(_ offset: UInt64) -> LiveDecision {
        if offset <= position || done.contains(offset) || given.contains(offset) {
            waiting.remove(offset)
            return .duplicate
        }
        if phase == .catchingUp { return .hold }
        guard !ordered || isFilled(below: offset) else {
            waiting.insert(offset)
            return .hold
        }
        waiting.remove(offset)
        given.insert(offset)
        return .deliver
    }

    /// Whether held messages may be asked about again: live, and the lowest one held for a
    /// gap (if any) has none below it now.
    var canRelease: Bool {
        guard phase == .live else { return false }
        guard ordered, let lowest = waiting.min() else { return true }
        return isFilled(below: lowest) || lowest <= position
    }

    /// Whether every offset between the position and `offset` is done or given.
    private func isFilled(below offset: UInt64) -> Bool {
        guard offset > position + 1 else { return true }
        let between = offset - position - 1
        // More offsets between than done and given together: one of them is missing.
        guard between <= UInt64(given.count + done.count) else { return false }
        return (position + 1..<offset).allSatisfy { given.contains($0) || done.contains($0) }
    }

    /// The device ACKed the delivery at `offset`.
    mutating func acknowledged(_ offset: UInt64) {
        given.remove(offset)
        markDone(offset...offset)
    }

    /// The entry at `offset` needs no delivery to this device (a carbon it declined, a
    /// message that could not be read, its own chat, stored now).
    mutating func skipped(_ offset: UInt64) {
        given.remove(offset)
        markDone(offset...offset)
    }

    // MARK: Gaps

    /// Looks for a gap below offsets done or given, at `now`: the first time one is seen it is
    /// noted; once it has stayed open for ``gapRepairDelay``, the archive is read for it.
    mutating func checkGap(now: NIODeadline) -> Read? {
        guard phase == .live, !reading, let above = lowestAbove, above > position + 1 else {
            gapSince = nil
            return nil
        }
        guard let since = gapSince else {
            gapSince = now
            return nil
        }
        guard now - since >= Self.gapRepairDelay else { return nil }
        reading = true
        return Read(after: position, through: above - 1, limit: Self.pageSize, isRepair: true)
    }

    /// Whether a gap is open (the connection checks it again after ``gapRepairDelay``).
    /// (Asked at every live delivery: while the next offset is given, which is the usual case,
    /// it costs a lookup.)
    var hasGap: Bool {
        guard !given.contains(position + 1) else { return false }
        return !done.isEmpty || !waiting.isEmpty || given.contains { $0 > position + 1 }
    }

    private var lowestAbove: UInt64? {
        [done.min(), given.filter { $0 > position }.min(), waiting.filter { $0 > position }.min()].compactMap { $0 }.min()
    }

    // MARK: Saving

    /// The position to save, if it moved since the last one handed out.
    mutating func positionToSave() -> UInt64? {
        if let saved, position <= saved { return nil }
        saved = position
        return position
    }

    private mutating func markDone(_ range: ClosedRange<UInt64>) {
        if range.lowerBound <= position + 1 {
            position = max(position, range.upperBound)
        } else {
            for offset in range { done.insert(offset) }
        }
        while done.remove(position + 1) != nil { position += 1 }
        if done.count > Self.maxDoneAbove, let lowest = done.min() {
            // The gap below `lowest` is given up: the device misses what the archive could
            // not give it (it may SYNC).
            gapsGivenUp += 1
            position = lowest
            done.remove(lowest)
            while done.remove(position + 1) != nil { position += 1 }
        }
    }
}

/// Where a device's catch-up starts at login (docs/PROTOCOL.md 6.14), from the position it
/// sent in LOGIN, the one the archive kept for it, and what its stream holds.
enum SyncStart {
    /// The position to catch up from, and the SYNC_STATUS that says how it was taken.
    static func decide(asked: StreamPosition?, stored: UInt64?, bounds: StreamBounds, epoch: UInt64) -> (position: UInt64, status: IMSyncStatus) {
        let last = bounds.last
        let kept = stored.map { min($0, last) }
        var position: UInt64
        var status: IMSyncStatus
        if let asked {
            if asked.epoch != epoch {
                (position, status) = (kept ?? last, .epochChanged)
            } else if asked.offset > last {
                (position, status) = (kept ?? last, .refused)
            } else {
                (position, status) = (asked.offset, .continued)
            }
        } else if let kept {
            (position, status) = (kept, .continued)
        } else {
            (position, status) = (last, .new)
        }
        if status == .continued && bounds.hasLost(after: position) { status = .expired }
        return (position, status)
    }
}
