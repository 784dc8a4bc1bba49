@testable import IMGateway
import IMArchive
import IMWire
import NIOCore
import Testing

@Suite("StreamSync")
struct StreamSyncTests {
    static func entries(_ offsets: ClosedRange<UInt64>, origin: String? = nil) -> [StreamSync.PageEntry] {
        offsets.map { StreamSync.PageEntry(offset: $0, origin: origin) }
    }

    /// The interleavings of a SYNC sent right after LOGIN_OK with the login's catch-up: the
    /// SYNC's bounds come back before, between or after the login's page and the device's ACKs
    /// (spec-review defect 1: the catch-up arrived twice).
    enum SyncTiming: String, CaseIterable, Sendable {
        /// The SYNC's catch-up starts while the login's page is being read.
        case beforePage
        /// After the page, before the device ACKed it.
        case beforeAcks
        /// After the device ACKed part of it.
        case midAcks
        /// After the device ACKed all of it.
        case afterAcks
    }

    @Test("LOGIN with a position, then SYNC from the same position: whatever the order of reads and ACKs, each missed offset is given once", arguments: SyncTiming.allCases)
    func syncAfterLogin(_ timing: SyncTiming) {
        var sync = StreamSync(epoch: 7, device: "phone", wantsCarbons: true, position: 2, saved: 2)
        var given: [UInt64] = []
        func read(_ read: StreamSync.Read?) {
            guard let read else { return }
            let offsets = (read.after + 1)...min(read.through, read.after + UInt64(read.limit))
            let decisions = sync.pageRead(Self.entries(offsets), for: read)
            given += zip(offsets, decisions).filter { $0.1 == .deliver }.map(\.0)
        }
        func syncFromLoginPosition() { read(sync.catchUp(from: 2, through: 12)) }
        let login = sync.catchUp(through: 12)
        if timing == .beforePage { syncFromLoginPosition() }
        read(login)
        if timing == .beforeAcks { syncFromLoginPosition() }
        for offset in UInt64(3)...7 { sync.acknowledged(offset) }
        if timing == .midAcks { syncFromLoginPosition() }
        for offset in UInt64(8)...12 { sync.acknowledged(offset) }
        if timing == .afterAcks { syncFromLoginPosition() }
        read(sync.nextRead())
        #expect(given == Array(3...12), "each of 3...12 once")
        #expect(sync.isLive && sync.position == 12)
    }

    @Test("a SYNC from before where the connection started gives those again, once; one from its start gives nothing more")
    func syncFromEarlier() {
        var sync = StreamSync(epoch: 7, device: "phone", wantsCarbons: true, position: 5, saved: 5)
        #expect(sync.catchUp(through: 5) == nil)
        // The device lost 3...5 (its store was restored from a backup): it asks from 2.
        guard let read = sync.catchUp(from: 2, through: 5) else {
            Issue.record("nothing read for a SYNC from before the start")
            return
        }
        #expect(sync.pageRead(Self.entries(3...5), for: read) == [.deliver, .deliver, .deliver])
        for offset in UInt64(3)...5 { sync.acknowledged(offset) }
        #expect(sync.coveredFrom == 2)
        // The same SYNC again: this connection gave them.
        if let again = sync.catchUp(from: 2, through: 5) {
            #expect(sync.pageRead(Self.entries(3...5), for: again) == [.skip, .skip, .skip])
        }
    }

    @Test("a catch-up reads page by page as the device ACKs, holds the broker's messages, then dedups them")
    func catchUp() {
        var sync = StreamSync(epoch: 7, device: "phone", wantsCarbons: true, position: 10, saved: 10)
        guard let first = sync.catchUp(through: 300) else {
            Issue.record("nothing to read")
            return
        }
        #expect(first == StreamSync.Read(after: 10, through: 300, limit: StreamSync.pageSize))
        #expect(!sync.isLive)
        // A broker message meanwhile: held, whatever its offset.
        #expect(sync.live(20) == .hold)
        #expect(sync.live(301) == .hold)
        #expect(sync.nextRead() == nil, "one read at a time")
        let page = Self.entries(11...138)
        #expect(sync.pageRead(page, for: first) == Array(repeating: .deliver, count: 128))
        #expect(sync.nextRead() == nil, "the device holds a page unACKed")
        for offset in UInt64(11)...75 { sync.acknowledged(offset) }
        #expect(sync.position == 75)
        guard let second = sync.nextRead() else {
            Issue.record("no second page once half was ACKed")
            return
        }
        #expect(second.after == 138)
        // The rest: 139...300, fewer than a page would hold if the page is short (here 162 > 128:
        // a full page, then the last one).
        _ = sync.pageRead(Self.entries(139...266), for: second)
        for offset in UInt64(76)...266 { sync.acknowledged(offset) }
        guard let third = sync.nextRead() else {
            Issue.record("no third page")
            return
        }
        #expect(sync.pageRead(Self.entries(267...300), for: third).count == 34)
        #expect(sync.isLive)
        // The held messages, asked again: 20 was delivered from the archive, 301 is new.
        #expect(sync.live(20) == .duplicate)
        #expect(sync.live(290) == .duplicate, "given and not ACKed yet is a duplicate too")
        #expect(sync.live(301) == .deliver)
        #expect(sync.live(301) == .duplicate)
    }

    @Test("the device's own messages and, without carbons, its user's other devices' are skipped and count as done")
    func ownAndCarbons() {
        var sync = StreamSync(epoch: 7, device: "phone", wantsCarbons: false, position: 0, saved: 0)
        let read = sync.catchUp(through: 4)!
        let page = [
            StreamSync.PageEntry(offset: 1, origin: nil), StreamSync.PageEntry(offset: 2, origin: "phone"),
            StreamSync.PageEntry(offset: 3, origin: "tablet"), StreamSync.PageEntry(offset: 4, origin: nil),
        ]
        #expect(sync.pageRead(page, for: read) == [.deliver, .skip, .skip, .deliver])
        sync.acknowledged(1)
        #expect(sync.position == 3)
        sync.acknowledged(4)
        #expect(sync.position == 4)
        #expect(sync.positionToSave() == 4)
        #expect(sync.positionToSave() == nil, "handed out once")
        var new = StreamSync(epoch: 7, device: "tablet", wantsCarbons: true, position: 0, saved: nil)
        #expect(new.positionToSave() == 0, "a device the archive had no position for gets one, even 0")
    }

    @Test("offsets missing from a page were deleted by retention: done")
    func expired() {
        var sync = StreamSync(epoch: 7, device: "phone", wantsCarbons: true, position: 0, saved: 0)
        let read = sync.catchUp(through: 10)!
        #expect(sync.pageRead(Self.entries(6...10), for: read).allSatisfy { $0 == .deliver })
        #expect(sync.position == 5)
        for offset in UInt64(6)...10 { sync.acknowledged(offset) }
        #expect(sync.position == 10 && sync.isLive)
    }

    @Test("a message above a gap is held until the gap closes; a gap open for the delay is read from the archive, then what was held follows")
    func gapRepair() {
        var sync = StreamSync(epoch: 7, device: "phone", wantsCarbons: true, position: 5, saved: 5)
        #expect(sync.live(6) == .deliver)
        // 7 and 8 have not come: 9 waits for them (it was stored after them).
        #expect(sync.live(9) == .hold)
        #expect(!sync.canRelease)
        sync.acknowledged(6)
        #expect(sync.position == 6 && sync.hasGap)
        let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
        #expect(sync.checkGap(now: start) == nil, "noted")
        #expect(sync.checkGap(now: start + .seconds(1)) == nil, "not yet")
        // 7 arrives late from the broker: delivered; 9 still waits for 8.
        #expect(sync.live(7) == .deliver)
        #expect(!sync.canRelease)
        #expect(sync.live(9) == .hold, "asked again too early: held again")
        sync.acknowledged(7)
        guard let repair = sync.checkGap(now: start + .seconds(2)) else {
            Issue.record("no repair read")
            return
        }
        #expect(repair == StreamSync.Read(after: 7, through: 8, limit: StreamSync.pageSize, isRepair: true))
        #expect(sync.pageRead(Self.entries(8...8), for: repair) == [.deliver])
        #expect(sync.canRelease, "8 is given: 9 may go")
        #expect(sync.live(9) == .deliver)
        #expect(sync.live(8) == .duplicate, "the broker's late copy")
        sync.acknowledged(8)
        sync.acknowledged(9)
        #expect(sync.position == 9 && !sync.hasGap)
        // A gap whose messages are gone from the archive closes all the same.
        #expect(sync.live(12) == .hold)
        _ = sync.checkGap(now: start)
        let empty = sync.checkGap(now: start + .seconds(3))!
        #expect(empty == StreamSync.Read(after: 9, through: 11, limit: StreamSync.pageSize, isRepair: true))
        #expect(sync.pageRead([], for: empty).isEmpty)
        #expect(sync.canRelease && sync.live(12) == .deliver)
        sync.acknowledged(12)
        #expect(sync.position == 12)
    }

    @Test("two gateways publishing in the other order than they stored: the later offset waits for the earlier, then both go in order")
    func crossedPublishes() {
        var sync = StreamSync(epoch: 7, device: "phone", wantsCarbons: true, position: 20, saved: 20)
        #expect(sync.live(22) == .hold)
        #expect(sync.live(21) == .deliver)
        #expect(sync.canRelease)
        #expect(sync.live(22) == .deliver)
        // A device's own message (done without a delivery) fills a gap too.
        #expect(sync.live(25) == .hold)
        sync.skipped(23)
        #expect(!sync.canRelease)
        sync.skipped(24)
        #expect(sync.canRelease && sync.live(25) == .deliver)
    }

    @Test("a SYNC from past the position moves it there; from before it re-delivers what is not given")
    func syncFrom() {
        var sync = StreamSync(epoch: 7, device: "phone", wantsCarbons: true, position: 10, saved: 10)
        #expect(sync.catchUp(from: 15, through: 15) == nil)
        #expect(sync.position == 15 && sync.isLive)
        #expect(sync.live(16) == .deliver)
        let read = sync.catchUp(from: 12, through: 20)!
        #expect(read.after == 12)
        #expect(sync.pageRead(Self.entries(13...20), for: read) == [.deliver, .deliver, .deliver, .skip, .deliver, .deliver, .deliver, .deliver])
    }

    @Test("a read that fails ends the catch-up: live messages flow")
    func readFails() {
        var sync = StreamSync(epoch: 7, device: "phone", wantsCarbons: true, position: 0, saved: 0)
        _ = sync.catchUp(through: 100)
        #expect(sync.live(101) == .hold)
        sync.readFailed()
        #expect(sync.isLive && sync.canRelease)
        #expect(sync.live(101) == .deliver, "an archive that cannot be read does not stop the broker's messages")
        #expect(sync.live(103) == .deliver)
        // Once a read succeeds, the order holds again.
        let read = sync.catchUp(through: 103)!
        _ = sync.pageRead(Self.entries(1...100), for: read)
        #expect(sync.live(105) == .hold)
    }

    @Test("memory stays bounded when a gap cannot be filled")
    func bounded() {
        var sync = StreamSync(epoch: 7, device: "phone", wantsCarbons: true, position: 0, saved: 0)
        for offset in UInt64(2)...UInt64(StreamSync.maxDoneAbove + 2) {
            _ = sync.live(offset)
            sync.acknowledged(offset)
        }
        #expect(sync.gapsGivenUp == 1)
        #expect(sync.position == UInt64(StreamSync.maxDoneAbove + 2))
    }

    @Test("where a login's catch-up starts", arguments: [
        // asked, stored, first, last -> position, status
        (StreamPosition?.none, UInt64?.none, UInt64(1), UInt64(50), UInt64(50), IMSyncStatus.new),
        (nil, 20, 1, 50, 20, .continued),
        (StreamPosition(epoch: 7, offset: 30), 20, 1, 50, 30, .continued),
        (StreamPosition(epoch: 7, offset: 10), 20, 1, 50, 10, .continued),
        (StreamPosition(epoch: 9, offset: 30), 20, 1, 50, 20, .epochChanged),
        (StreamPosition(epoch: 9, offset: 30), nil, 1, 50, 50, .epochChanged),
        (StreamPosition(epoch: 7, offset: 51), 20, 1, 50, 20, .refused),
        (StreamPosition(epoch: 7, offset: 99), nil, 1, 50, 50, .refused),
        (nil, 20, 31, 50, 20, .expired),
        (nil, 30, 31, 50, 30, .continued),
        (nil, 70, 1, 50, 50, .continued),
    ])
    func start(asked: StreamPosition?, stored: UInt64?, first: UInt64, last: UInt64, position: UInt64, status: IMSyncStatus) {
        let decided = SyncStart.decide(asked: asked, stored: stored, bounds: StreamBounds(last: last, first: first), epoch: 7)
        #expect(decided.position == position)
        #expect(decided.status == status)
    }

    @Test("a cap per conversation left holes up to an offset: a position below it is partly expired, one at it or above is not", arguments: [
        // stored, trimmedThrough -> status
        (UInt64(20), UInt64(25), IMSyncStatus.expired),
        (24, 25, .expired),
        (25, 25, .continued),
        (40, 25, .continued),
        (20, 0, .continued),
    ])
    func startAfterTrimming(stored: UInt64, trimmedThrough: UInt64, status: IMSyncStatus) {
        let decided = SyncStart.decide(asked: nil, stored: stored, bounds: StreamBounds(last: 50, first: 1, trimmedThrough: trimmedThrough), epoch: 7)
        #expect(decided.position == stored)
        #expect(decided.status == status)
    }
}
