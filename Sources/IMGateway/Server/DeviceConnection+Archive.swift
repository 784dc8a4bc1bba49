import IMArchive
import IMWire
import Logging
import Mosquitto
import NIOCore

extension DeviceConnection {
    /// How long a catch-up whose read failed waits before trying again.
    static let catchUpRetry: TimeAmount = .seconds(2)

    // MARK: Catching up

    /// Starts the connection's archive side at LOGIN_OK: the device is where the login decided
    /// (``SyncStart``), and what the stream held up to its end then is caught up first. When
    /// the login could not read the archive, live messages flow and the start is tried again.
    func openArchiveLink(_ start: LoginSync?, asked: StreamPosition?) {
        guard let archive = gateway.archive, let session else { return }
        var link = ArchiveLink(asked: asked)
        if let start, let last = start.last {
            // A device the archive had no position for gets this one saved.
            var sync = StreamSync(
                epoch: archive.epoch.rawValue, device: session.device, wantsCarbons: machine.downlink.wantsCarbons,
                position: start.position, saved: start.saved)
            let read = sync.catchUp(through: last)
            link.sync = sync
            machine.archive = link
            if let read { readArchive(read) }
            savePosition()
        } else {
            link.retryCatchUp = true
            machine.archive = link
            armArchiveTimer(after: Self.catchUpRetry)
        }
    }

    /// Reads `read` from the archive off the event loop; the page comes back to ``pageArrived(_:for:)``.
    func readArchive(_ read: StreamSync.Read) {
        guard let archive = gateway.archive, let session, let loop = output?.context.eventLoop else { return }
        let stream = session.user
        let connection = NIOLoopBound(self, eventLoop: loop)
        Task {
            let result: Result<[StoredEntry], ArchiveError>
            do throws(ArchiveError) {
                result = .success(try await archive.read(stream: stream, after: read.after, through: read.through, limit: read.limit))
            } catch {
                result = .failure(error)
            }
            loop.execute { connection.value.pageArrived(result, for: read) }
        }
    }

    /// A page of the archive, back on the event loop: its entries become DELIVERY frames
    /// (ARCHIVED) unless the device has them; then the next page, or the end of the catch-up.
    func pageArrived(_ result: Result<[StoredEntry], ArchiveError>, for read: StreamSync.Read) {
        guard machine.isLoggedIn, var link = machine.archive, var sync = link.sync, let session else { return }
        switch result {
        case .failure(let error):
            logger.warning("cannot catch the device up from the archive; trying again", metadata: ["error": "\(error)"])
            sync.readFailed()
            if !read.isRepair { link.retryCatchUp = true }
            // The SYNCs waiting for this catch-up are refused: the device may send them again.
            for pending in link.syncs {
                reply(Ack.storeUnavailable(sequence: pending.header.sequence, retryAfter: error.retryAfter ?? 1_000, message: error.message),
                      to: pending.header)
            }
            link.syncs = []
            link.sync = sync
            machine.archive = link
            armArchiveTimer(after: Self.catchUpRetry)
        case .success(let entries):
            let decisions = sync.pageRead(entries.map { StreamSync.PageEntry(offset: $0.offset, origin: $0.origin) }, for: read)
            for (entry, decision) in zip(entries, decisions) where decision == .deliver {
                guard let delivery = Self.replay(entry, to: session.user) else {
                    link.unreadable += 1
                    if link.unreadable == 1 {
                        logger.warning("skipping an unreadable message of the archive", metadata: ["offset": "\(entry.offset)", "sender": "\(entry.sender)"])
                    }
                    sync.skipped(entry.offset)
                    continue
                }
                machine.downlink.queue.enqueue(
                    Downlink.Entry(
                        message: .delivery(delivery), deliveryID: nil,
                        origin: entry.origin == nil && !delivery.deleted ? PendingDeliveries.Origin(from: delivery.from, messageID: delivery.messageID) : nil,
                        offset: entry.offset),
                    class: .chat)
                lifetime.counters.messagesOut.add(1, ordering: .relaxed)
                gateway.statistics.caughtUp.add(1, ordering: .relaxed)
            }
            link.sync = sync
            machine.archive = link
        }
        continueCatchUp()
        writeDownlink()
        startUplink(now: now)
        flushIfNeeded()
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
    func continueCatchUp() {
        guard var link = machine.archive, var sync = link.sync else { return }
        let read = sync.nextRead()
        link.sync = sync
        machine.archive = link
        if let read {
            readArchive(read)
            return
        }
        guard sync.isLive else { return }
        let syncs = link.syncs
        machine.archive?.syncs = []
        releaseHeld()
        // After the deliveries queued so far (writeSyncAcks()).
        machine.archive?.syncAcks += syncs.map { pending in
            (Ack(sequence: pending.header.sequence, streamOffset: pending.through, streamEpoch: sync.epoch, syncStatus: pending.status),
             pending.header.sessionID)
        }
        if sync.hasGap { armArchiveTimer(after: StreamSync.gapRepairDelay) }
        writeSyncAcks()
    }

    /// Writes the SYNC ACKs that are due once no chat delivery waits in the downlink queue
    /// (those queued before an ACK are written before it).
    func writeSyncAcks() {
        guard let acks = machine.archive?.syncAcks, !acks.isEmpty, machine.downlink.queue.count(of: .chat) == 0 else { return }
        machine.archive?.syncAcks = []
        let timestamp = unixSeconds()
        for (ack, sessionID) in acks { write(ack.frame(timestamp: timestamp, sessionID: sessionID)) }
    }

    /// A chat message from the broker with `offset` in the user's stream: whether to deliver
    /// it, drop it as a duplicate (acknowledged to the broker), or hold it until the catch-up
    /// is done.
    func liveDecision(_ message: MosquittoMessage, _ kind: GatewayTopics.Kind?, offset: UInt64) -> StreamSync.LiveDecision {
        guard var link = machine.archive, var sync = link.sync else { return .deliver }
        let decision = sync.live(offset)
        if decision == .hold { link.held.append((message, kind, offset)) }
        link.sync = sync
        machine.archive = link
        if decision != .duplicate && sync.hasGap { armArchiveTimer(after: StreamSync.gapRepairDelay) }
        return decision
    }

    /// Asks again about the messages held (while catching up, or above a gap) once the sync
    /// lets them go, in the order of their offsets: those still above a gap are held again.
    /// Called after a message from the broker was queued, after a page, and when an offset
    /// is done.
    func releaseHeld() {
        guard let link = machine.archive, !link.held.isEmpty, !link.releasing, link.sync?.canRelease == true else { return }
        let held = link.held.sorted { $0.offset < $1.offset }
        machine.archive?.held = []
        machine.archive?.releasing = true
        for entry in held { receive(entry.message, entry.kind) }
        machine.archive?.releasing = false
    }

    /// The device ACKed (or the gateway dropped) the delivery at `offset`.
    func archiveDone(_ offset: UInt64) {
        guard machine.archive?.sync != nil else { return }
        machine.archive?.sync?.skipped(offset)
        continueCatchUp()
    }

    /// Hands the device's position to the archive when it moved: it is saved with the next
    /// commit of a message, or within a second; `promptly` (the session ends), at once.
    func savePosition(promptly: Bool = false) {
        guard let archive = gateway.archive, let session else { return }
        // Promptly: also the one handed out before, which may still wait for its commit.
        guard let position = machine.archive?.sync?.positionToSave() ?? (promptly ? machine.archive?.sync?.saved : nil) else { return }
        archive.savePosition(DevicePosition(user: session.user, device: session.device, offset: position), promptly: promptly)
    }

    // MARK: The timer: gaps, and a catch-up tried again

    func armArchiveTimer(after delay: TimeAmount) {
        machine.armArchiveTimer(now: now, after: delay)
        armTimer()
    }

    /// The archive's timer is due (``ConnectionStateMachine/archiveTimerDue(now:)``): a
    /// catch-up to try again, or a gap to read.
    func archiveTimerFired(now: NIODeadline) {
        guard let link = machine.archive else { return }
        if link.retryCatchUp {
            machine.archive?.retryCatchUp = false
            startCatchUp(from: link.sync == nil ? link.asked : nil, answering: nil)
            return
        }
        guard var sync = link.sync else { return }
        let read = sync.checkGap(now: now)
        machine.archive?.sync = sync
        if let read {
            logger.info("reading a gap of the stream from the archive", metadata: ["after": "\(read.after)", "through": "\(read.through)"])
            readArchive(read)
        } else if sync.hasGap {
            armArchiveTimer(after: StreamSync.gapRepairDelay)
        }
    }

    // MARK: SYNC (PROTOCOL.md 6.14)

    /// SYNC: what the stream holds now is read, and everything after the position (the
    /// device's, if it gave one of this epoch and not past the end) that this connection has
    /// not given it is delivered; then the ACK.
    func requestSync(_ request: Sync, _ header: IMFrameHeader) {
        guard gateway.archive != nil, machine.archive != nil else {
            reply(Ack.refusing(sequence: header.sequence, code: .unknownOperation, message: "this gateway keeps no message archive"), to: header)
            return
        }
        startCatchUp(from: request.position, answering: header)
    }

    /// Reads the stream's end (and, before the start is known, the device's saved position),
    /// then catches up from `asked` (or the position) to it; answers the SYNC with `header`,
    /// if any, once done.
    func startCatchUp(from asked: StreamPosition?, answering header: IMFrameHeader?) {
        guard let archive = gateway.archive, let session, let loop = output?.context.eventLoop else { return }
        let (user, device) = (session.user, session.device)
        let needsStart = machine.archive?.sync == nil
        let connection = NIOLoopBound(self, eventLoop: loop)
        Task {
            let found: Result<(StreamBounds, UInt64?), ArchiveError>
            do throws(ArchiveError) {
                let stored = needsStart ? try await archive.position(user: user, device: device) : nil
                found = .success((try await archive.bounds(of: user), stored))
            } catch {
                found = .failure(error)
            }
            loop.execute { connection.value.boundsArrived(found, asked: asked, answering: header) }
        }
    }

    private func boundsArrived(_ found: Result<(StreamBounds, UInt64?), ArchiveError>, asked: StreamPosition?, answering header: IMFrameHeader?) {
        guard machine.isLoggedIn, var link = machine.archive, let archive = gateway.archive, let session else { return }
        let bounds: StreamBounds
        let stored: UInt64?
        switch found {
        case .failure(let error):
            if let header {
                reply(Ack.storeUnavailable(sequence: header.sequence, retryAfter: error.retryAfter ?? 1_000, message: error.message), to: header)
            } else {
                logger.warning("cannot read the archive to catch the device up; trying again", metadata: ["error": "\(error)"])
                link.retryCatchUp = true
                machine.archive = link
                armArchiveTimer(after: Self.catchUpRetry)
            }
            flushIfNeeded()
            return
        case .success(let value):
            (bounds, stored) = value
        }
        let epoch = archive.epoch.rawValue
        var status = IMSyncStatus.continued
        var read: StreamSync.Read?
        if var sync = link.sync {
            var from: UInt64?
            if let asked {
                if asked.epoch != epoch {
                    status = .epochChanged
                } else if asked.offset > bounds.last {
                    status = .refused
                } else {
                    from = asked.offset
                }
            }
            if status == .continued && bounds.hasLost(after: from ?? sync.position) { status = .expired }
            read = sync.catchUp(from: from, through: bounds.last)
            link.sync = sync
        } else {
            // The start the login could not decide.
            let start = SyncStart.decide(asked: asked, stored: stored, bounds: bounds, epoch: epoch)
            status = start.status
            var sync = StreamSync(
                epoch: epoch, device: session.device, wantsCarbons: machine.downlink.wantsCarbons, position: start.position, saved: stored)
            read = sync.catchUp(through: bounds.last)
            link.sync = sync
            logger.info("catching the device up from the archive", metadata: ["position": "\(start.position)", "status": "\(start.status)"])
        }
        if let header { link.syncs.append((header, status, bounds.last)) }
        machine.archive = link
        savePosition()
        if let read { readArchive(read) } else { continueCatchUp() }
        writeDownlink()
        flushIfNeeded()
    }

    /// Ends the archive side with the session: the timer stops, the position is saved.
    func closeArchiveLink() {
        machine.archive?.deadline = nil
        savePosition(promptly: true)
    }
}
