@testable import IMGateway
import IMArchive
import IMWire
import Mosquitto
import NIOCore
import Testing

/// The archive-sync machine inside the logged-in state (docs/PROTOCOL.md 6.14), driven through
/// ``ConnectionStateMachine`` on a simulated clock: the catch-up at LOGIN_OK, page by page as the
/// device ACKs; SYNC and its ACK after the deliveries; live messages in the order of the stream;
/// a gap read from the archive after its delay; a failed read tried again.
@Suite("ConnectionStateMachine's archive side")
struct ConnectionStateMachineArchiveTests {
    static let epoch: UInt64 = 7

    static func harness() -> MachineHarness {
        var limits = MachineHarness.limits
        limits.archiveEpoch = epoch
        return MachineHarness(limits: limits)
    }

    /// Stored entries for alice at `offsets`, from bob.
    static func entries(_ offsets: ClosedRange<UInt64>) -> [StoredEntry] {
        offsets.map { offset in
            StoredEntry(
                stream: "alice", offset: offset, origin: nil, sender: "bob", messageID: "m-\(offset)", serverTime: 1,
                body: PayloadCodec.encode(ChatPayload.archived(send: ChatSend(to: "alice", messageID: "m-\(offset)", content: .text("\(offset)")), from: "bob", serverTime: 1)))
        }
    }

    static func read(in actions: [ConnectionAction]) -> StreamSync.Read? {
        actions.lazy.compactMap { action -> StreamSync.Read? in if case .readArchive(let read) = action { read } else { nil } }.first
    }

    /// The device ACKs every frame with these sequence numbers, each in a read burst.
    static func ack(_ harness: inout MachineHarness, _ sequences: ClosedRange<UInt32>) -> [ConnectionAction] {
        var actions: [ConnectionAction] = []
        for sequence in sequences { actions += harness.send(.ack(Ack(sequence: sequence))) }
        return actions
    }

    @Test("LOGIN_OK names the position; the catch-up follows, ARCHIVED, before the broker's messages, and the position is saved as the device ACKs")
    func catchUpAtLogin() throws {
        var harness = Self.harness()
        let login = harness.logIn(sync: LoginSync(position: 2, status: .continued, last: 5, saved: 2))
        #expect(login.lines == ["sessionOpened", "loggedIn alice/phone", "write LOGIN_OK", "readArchive 2...5"])
        let read = try #require(Self.read(in: login))
        // The broker delivers offset 6 meanwhile: held, and acknowledged to the broker at once
        // (the archive has it; held, it would hold the session's writes).
        #expect(harness.mail(MachineHarness.chatMessage(from: "bob", to: "alice", id: "m-6", deliveryID: 60, offset: 6, epoch: Self.epoch)).lines == [
            "uplink acks=[60] receipts=[] probes=0",
        ])
        #expect(harness.mail(.page(.success(Self.entries(3...5)), read)).lines == [
            "write DELIVERY m-3 offset=3 archived", "write DELIVERY m-4 offset=4 archived", "write DELIVERY m-5 offset=5 archived",
            "write DELIVERY m-6 offset=6",
        ])
        let acked = Self.ack(&harness, 2...5)
        #expect(acked.lines.contains("savePosition 6"))
    }

    @Test("SYNC right after LOGIN_OK: answered once the catch-up is done, after its deliveries; nothing given twice, whatever comes first")
    func syncAfterLogin() throws {
        for bothFirst in [true, false] {
            var harness = Self.harness()
            let position = StreamPosition(epoch: Self.epoch, offset: 2)
            let login = harness.logIn(position: position, sync: LoginSync(position: 2, status: .continued, last: 12, saved: 2))
            let read = try #require(Self.read(in: login))
            let sync = harness.send(.sync(Sync(position: position)))
            #expect(sync.lines == ["readStreamBounds #2"])
            let bounds = ConnectionMailbox.Mail.bounds(.success((StreamBounds(last: 12, first: 1), nil)), asked: position, answering: harness.frame(.heartbeat, sequence: 2).header)
            var actions: [ConnectionAction] = []
            if bothFirst {
                actions += harness.mail(bounds)
                actions += harness.mail(.page(.success(Self.entries(3...12)), read))
            } else {
                actions += harness.mail(.page(.success(Self.entries(3...12)), read))
                actions += Self.ack(&harness, 2...11)
                actions += harness.mail(bounds)
            }
            // The SYNC's own read, if it makes one, finds only what was given.
            if let again = Self.read(in: actions) {
                actions += harness.mail(.page(.success(Self.entries(3...12)), again))
            }
            let delivered = actions.lines
            let deliveries = delivered.filter { $0.hasPrefix("write DELIVERY") }
            #expect(deliveries.count == 10, "each of 3...12 once: \(deliveries)")
            #expect(delivered.contains("write ACK #2 offset=12"), "the SYNC's ACK: \(delivered)")
            #expect(delivered.firstIndex(of: "write ACK #2 offset=12") ?? 0 > delivered.lastIndex { $0.hasPrefix("write DELIVERY") } ?? 0)
        }
    }

    @Test("a gap below what arrived is read from the archive after 2 s; what was held above it follows, in order")
    func gapRepair() throws {
        var harness = Self.harness()
        _ = harness.logIn(sync: LoginSync(position: 0, status: .continued, last: 0, saved: 0))
        #expect(harness.mail(MachineHarness.chatMessage(from: "bob", to: "alice", id: "m-1", deliveryID: 1, offset: 1, epoch: Self.epoch)).lines == ["write DELIVERY m-1 offset=1"])
        _ = Self.ack(&harness, 2...2)
        // 2 never comes (the sender's gateway died between storing and publishing).
        #expect(harness.mail(MachineHarness.chatMessage(from: "bob", to: "alice", id: "m-3", deliveryID: 3, offset: 3, epoch: Self.epoch)).lines == [
            "uplink acks=[3] receipts=[] probes=0",
        ], "held above the gap, and acknowledged to the broker")
        #expect(harness.advance(by: .seconds(1)).lines.filter { $0.hasPrefix("readArchive") } == [])
        var actions = harness.advance(by: .seconds(1))
        if Self.read(in: actions) == nil { actions += harness.advance(by: .seconds(2)) }
        let read = try #require(Self.read(in: actions), "\(actions.lines)")
        #expect(read.isRepair && read.after == 1 && read.through == 2)
        #expect(harness.mail(.page(.success(Self.entries(2...2)), read)).lines == ["write DELIVERY m-2 offset=2 archived", "write DELIVERY m-3 offset=3"])
    }

    @Test("a catch-up whose read fails: live messages flow, the SYNCs waiting are refused, it is tried again 2 s later")
    func readFails() throws {
        var harness = Self.harness()
        let login = harness.logIn(sync: LoginSync(position: 2, status: .continued, last: 5, saved: 2))
        let read = try #require(Self.read(in: login))
        harness.send(.sync(Sync()))
        let header = harness.frame(.heartbeat, sequence: 2).header
        _ = harness.mail(.bounds(.success((StreamBounds(last: 5, first: 1), nil)), asked: nil, answering: header))
        #expect(harness.mail(.page(.failure(.unavailable("down", retryAfter: 500)), read)).lines == ["write ACK #2 STORE_UNAVAILABLE"])
        #expect(harness.mail(MachineHarness.chatMessage(from: "bob", to: "alice", id: "m-6", deliveryID: 6, offset: 6, epoch: Self.epoch)).lines == ["write DELIVERY m-6 offset=6"], "live meanwhile")
        #expect(harness.advance(by: .seconds(2)).lines.contains("readStreamBounds"))
    }

    @Test("the position the login could not read: live messages flow, and the start is tried again on the timer")
    func startLater() {
        var harness = Self.harness()
        let login = harness.logIn(sync: LoginSync(position: 0, status: .unavailable, last: nil, saved: nil))
        #expect(login.lines == ["sessionOpened", "loggedIn alice/phone", "write LOGIN_OK"])
        #expect(harness.advance(by: .seconds(2)).lines.contains("readStreamBounds start"))
    }

    @Test("SYNC without an archive: UNKNOWN_OPERATION")
    func syncWithoutArchive() {
        var harness = MachineHarness()
        _ = harness.logIn()
        #expect(harness.send(.sync(Sync())).lines == ["write ACK #2 UNKNOWN_OPERATION"])
    }

    @Test("the position is saved at once when the session ends")
    func savedAtEnd() throws {
        var harness = Self.harness()
        let login = harness.logIn(sync: LoginSync(position: 2, status: .continued, last: 3, saved: 1))
        _ = harness.mail(.page(.success(Self.entries(3...3)), try #require(Self.read(in: login))))
        _ = Self.ack(&harness, 2...2)
        #expect(harness.machine.handle(.channelClosed).lines.contains("savePosition 3 promptly"))
    }
}
