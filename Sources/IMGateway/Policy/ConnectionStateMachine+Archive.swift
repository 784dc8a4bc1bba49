import IMArchive
import IMWire
import Mosquitto
import NIOCore

/// The archive's side of the data path (docs/PROTOCOL.md 6.14): the catch-up at LOGIN_OK and on
/// SYNC, a page at a time as the device ACKs; the order of live messages by their offsets; gaps
/// read after ``StreamSync/gapRepairDelay``; the device's position saved as it moves.
extension ConnectionStateMachine {
    // MARK: Starting

    /// Starts the archive side at LOGIN_OK: the device is where the login decided
    /// (``SyncStart``), and what the stream held up to its end then is caught up first. When
    /// the login could not read the archive, live messages flow and the start is tried again.
    mutating func openArchive(_ start: LoginSync?, asked: StreamPosition?) {
        guard let epoch = limits.archiveEpoch, let session else { return }
        var archive = ArchiveSync(epoch: epoch, asked: asked)
        guard let start, let last = start.last else {
            archive.retryCatchUp = true
            archive.arm(now: clock.now, after: ArchiveSync.catchUpRetry)
            self.session?.archive = archive
            return
        }
        // A device the archive had no position for gets this one saved.
        var sync = StreamSync(
            epoch: epoch, device: session.device, wantsCarbons: session.downlink.wantsCarbons, position: start.position, saved: start.saved)
        let read = sync.catchUp(through: last)
        archive.sync = sync
        self.session?.archive = archive
        if let read { emit(.readArchive(read)) }
        savePosition()
    }

    // MARK: Reading

    /// A page of the archive came back for `read`: its entries become DELIVERY frames
    /// (ARCHIVED) unless the device has them; then the next page, or the end of the catch-up.
    mutating func pageArrived(_ result: Result<[StoredEntry], ArchiveError>, for read: StreamSync.Read) {
        guard isLoggedIn, var session = self.session, var archive = session.archive, var sync = archive.sync else { return }
        session.archive = nil
        self.session = nil
        switch result {
        case .failure(let error):
            log(.warning, "cannot catch the device up from the archive; trying again", ["error": "\(error)"])
            sync.readFailed()
            if !read.isRepair { archive.retryCatchUp = true }
            // The SYNCs waiting for this catch-up are refused: the device may send them again.
            for pending in archive.syncs {
                reply(Ack.storeUnavailable(sequence: pending.header.sequence, retryAfter: error.retryAfter ?? 1_000, message: error.message),
                      sessionID: pending.header.sessionID)
            }
            archive.syncs = []
            archive.arm(now: clock.now, after: ArchiveSync.catchUpRetry)
        case .success(let entries):
            let decisions = sync.pageRead(entries.map { StreamSync.PageEntry(offset: $0.offset, origin: $0.origin) }, for: read)
            for (entry, decision) in zip(entries, decisions) where decision == .deliver {
                guard let delivery = Self.replay(entry, to: session.user) else {
                    archive.unreadable += 1
                    if archive.unreadable == 1 {
                        log(.warning, "skipping an unreadable message of the archive", ["offset": "\(entry.offset)", "sender": "\(entry.sender)"])
                    }
                    sync.skipped(entry.offset)
                    continue
                }
                session.downlink.queue.enqueue(
                    Downlink.Entry(
                        message: .delivery(delivery), deliveryID: nil,
                        origin: entry.origin == nil && !delivery.deleted ? PendingDeliveries.Origin(from: delivery.from, messageID: delivery.messageID) : nil,
                        offset: entry.offset),
                    class: .chat)
                counters.messagesOut.add(1, ordering: .relaxed)
                statistics.caughtUp.add(1, ordering: .relaxed)
            }
        }
        archive.sync = sync
        session.archive = archive
        self.session = session
        continueCatchUp()
        writeDownlink()
        flushUplink()
    }

    /// The DELIVERY of a stored entry for `user`'s device, or `nil` if it cannot be read.
    static func replay(_ entry: StoredEntry, to user: String) -> ChatDelivery? {
        guard let stored = try? PayloadCodec.decode(ChatPayload.self, from: entry.body),
              var delivery = try? stored.copy(for: user, own: entry.origin != nil).delivery()
        else { return nil }
        delivery.streamOffset = entry.offset
        delivery.archived = true
        return delivery
    }

    /// Reads the next page if one is due; once the catch-up is done, the messages the broker
    /// delivered meanwhile and the SYNC requests waiting for it are seen to.
    mutating func continueCatchUp() {
        guard let read = session?.archive?.sync?.nextRead() else {
            guard let archive = session?.archive, let sync = archive.sync, sync.isLive else { return }
            // After the deliveries queued so far (``LoggedIn/takeSyncAcks()``).
            session?.archive?.syncAcks += archive.syncs.map { pending in
                (Ack(sequence: pending.header.sequence, streamOffset: pending.through, streamEpoch: sync.epoch, syncStatus: pending.status),
                 pending.header.sessionID)
            }
            session?.archive?.syncs = []
            releaseHeld()
            let now = clock.now
            if sync.hasGap { session?.archive?.arm(now: now, after: StreamSync.gapRepairDelay) }
            writeDownlink()
            return
        }
        emit(.readArchive(read))
    }

    // MARK: Live

    /// A chat message from the broker with `offset` in the user's stream: whether to deliver
    /// it, drop it as a duplicate (acknowledged to the broker), or hold it until the catch-up
    /// is done or the gap below it closes.
    mutating func liveDecision(_ message: MosquittoMessage, _ kind: GatewayTopics.Kind?, offset: UInt64) -> StreamSync.LiveDecision {
        guard let decision = session?.archive?.sync?.live(offset) else { return .deliver }
        if decision == .hold { session?.archive?.held.append(ArchiveSync.Held(message: message, kind: kind, offset: offset)) }
        if decision != .duplicate, session?.archive?.sync?.hasGap == true {
            let now = clock.now
            session?.archive?.arm(now: now, after: StreamSync.gapRepairDelay)
        }
        return decision
    }

    /// Asks again about the messages held (while catching up, or above a gap) once the sync
    /// lets them go, in the order of their offsets: those still above a gap are held again.
    /// Called after a message from the broker was queued, after a page, and when an offset is
    /// done.
    mutating func releaseHeld() {
        guard let held = session?.archive?.releasable() else { return }
        session?.archive?.releasing = true
        for entry in held { received(entry.message, entry.kind) }
        session?.archive?.releasing = false
    }

    /// The device ACKed (or the gateway dropped, or the device sent) the entry at `offset`.
    mutating func archiveDone(_ offset: UInt64) {
        guard session?.archive?.sync != nil else { return }
        session?.archive?.sync?.skipped(offset)
        continueCatchUp()
    }

    /// Hands the device's position to the archive when it moved: it is saved with the next
    /// commit of a message, or within a second; `promptly` (the session ends), at once.
    mutating func savePosition(promptly: Bool = false) {
        guard let position = session?.archive?.sync?.positionToSave() ?? (promptly ? session?.archive?.sync?.saved : nil) else { return }
        emit(.savePosition(position, promptly: promptly))
    }

    // MARK: The timer: gaps, and a catch-up tried again

    /// The archive's timer, if due at `now`: a catch-up to try again, or a gap to read.
    mutating func archiveTimerFired(now: NIODeadline) {
        guard isLoggedIn, session?.archive?.timerDue(now: now) == true, let archive = session?.archive else { return }
        if archive.retryCatchUp {
            session?.archive?.retryCatchUp = false
            startCatchUp(from: archive.sync == nil ? archive.asked : nil, answering: nil)
            return
        }
        guard let read = session?.archive?.sync?.checkGap(now: now) else {
            if session?.archive?.sync?.hasGap == true { session?.archive?.arm(now: now, after: StreamSync.gapRepairDelay) }
            return
        }
        log(.info, "reading a gap of the stream from the archive", ["after": "\(read.after)", "through": "\(read.through)"])
        emit(.readArchive(read))
    }

    // MARK: SYNC (PROTOCOL.md 6.14)

    /// SYNC: what the stream holds now is read, and everything after the position (the
    /// device's, if it gave one of this epoch and not past the end) that this connection has
    /// not given it is delivered; then the ACK.
    mutating func requestSync(_ request: Sync, _ header: IMFrameHeader) {
        guard session?.archive != nil else {
            return refuse(header, .unknownOperation, "this gateway keeps no message archive")
        }
        startCatchUp(from: request.position, answering: header)
    }

    /// Reads the stream's end (and, before the start is known, the device's saved position),
    /// then catches up from `asked` (or the position) to it; answers the SYNC with `header`,
    /// if any, once done.
    mutating func startCatchUp(from asked: StreamPosition?, answering header: IMFrameHeader?) {
        emit(.readStreamBounds(needsStart: session?.archive?.sync == nil, asked: asked, answering: header))
    }

    /// The stream's bounds (and the saved position, if asked) came back.
    mutating func boundsArrived(
        _ found: Result<(StreamBounds, UInt64?), ArchiveError>, asked: StreamPosition?, answering header: IMFrameHeader?
    ) {
        guard isLoggedIn, let session, var archive = session.archive else { return }
        let bounds: StreamBounds
        let stored: UInt64?
        switch found {
        case .failure(let error):
            if let header {
                reply(Ack.storeUnavailable(sequence: header.sequence, retryAfter: error.retryAfter ?? 1_000, message: error.message),
                      sessionID: header.sessionID)
            } else {
                log(.warning, "cannot read the archive to catch the device up; trying again", ["error": "\(error)"])
                self.session?.archive?.retryCatchUp = true
                let now = clock.now
                self.session?.archive?.arm(now: now, after: ArchiveSync.catchUpRetry)
            }
            return
        case .success(let value):
            (bounds, stored) = value
        }
        self.session?.archive = nil
        var status = IMSyncStatus.continued
        var read: StreamSync.Read?
        if var sync = archive.sync {
            var from: UInt64?
            if let asked {
                if asked.epoch != archive.epoch {
                    status = .epochChanged
                } else if asked.offset > bounds.last {
                    status = .refused
                } else {
                    from = asked.offset
                }
            }
            if status == .continued && bounds.hasLost(after: from ?? sync.position) { status = .expired }
            read = sync.catchUp(from: from, through: bounds.last)
            archive.sync = sync
        } else {
            // The start the login could not decide.
            let start = SyncStart.decide(asked: asked, stored: stored, bounds: bounds, epoch: archive.epoch)
            status = start.status
            var sync = StreamSync(
                epoch: archive.epoch, device: session.device, wantsCarbons: session.downlink.wantsCarbons, position: start.position, saved: stored)
            read = sync.catchUp(through: bounds.last)
            archive.sync = sync
            log(.info, "catching the device up from the archive", ["position": "\(start.position)", "status": "\(start.status)"])
        }
        if let header { archive.syncs.append(ArchiveSync.WaitingSync(header: header, status: status, through: bounds.last)) }
        self.session?.archive = archive
        savePosition()
        if let read { emit(.readArchive(read)) } else { continueCatchUp() }
        writeDownlink()
    }

    /// Ends the archive side with the session: the timer stops, the position is saved at once.
    mutating func closeArchive() {
        session?.archive?.deadline = nil
        savePosition(promptly: true)
    }
}
