import Foundation
import IMArchive
import IMGateway
import IMWire
import Logging
import Synchronization
import Testing
import IMTestSupport

/// Several imgw processes on one broker and one PostgreSQL archive (docs/SCALING.md): one
/// stream, whichever gateway takes a user's chats; offsets in commit order; an archive that goes
/// away and comes back.
@Suite("Gateways on a shared PostgreSQL archive", .stopsWhatItStarts, .serialized, .timeLimit(.minutes(4)))
struct PostgresGatewayTests {
    static let logger = Logger(label: "pg-gateway-test")

    @Test("two gateways, 10,000 chats to one user from senders on both: her offsets are 1...10000, no gap, no repeat; a reader polling after its last offset misses none; she gets them all, in order")
    func twoGateways() async throws {
        let postgres = try await TestPostgres.start()
        let broker = try await TestBroker.start()
        let east = try await IMGWProcess.start(broker: broker, archive: .postgres(postgres.url))
        let west = try await IMGWProcess.start(broker: broker, archive: .postgres(postgres.url))
        // zoe's phone logs in once (its position is kept) and leaves.
        let phone = try await west.device("zoe")
        try await phone.send(.logout(Logout()))
        try await phone.closed()

        // A reader polls her stream meanwhile, as a device catching up would.
        let reader = try await PostgresArchiveStore.open(url: postgres.url, logger: Self.logger)
        let seen = Mutex<[UInt64]>([])
        let done = Mutex(false)
        let polling = Task {
            var last: UInt64 = 0
            while true {
                let finished = done.withLock { $0 }
                let page = try await reader.read(stream: "zoe", after: last, through: .max, limit: 1_000)
                seen.withLock { $0 += page.map(\.offset) }
                last = page.last?.offset ?? last
                if finished && page.isEmpty { return }
            }
        }

        let total = 10_000
        let senders = [("amy", east), ("ben", east), ("cat", west), ("dan", west)]
        let each = total / senders.count
        try await withThrowingTaskGroup(of: (String, [String: Ack]).self) { group in
            for (user, gateway) in senders {
                group.addTask {
                    let device = try await gateway.device(user)
                    let acks = try await device.chatMany(to: "zoe", ids: (0..<each).map { "\(user)-\($0)" }, text: "hi zoe", window: 64)
                    await device.drop()
                    return (user, acks)
                }
            }
            for try await (user, acks) in group {
                #expect(acks.count == each && acks.values.allSatisfy { $0.error == nil }, "\(user): \(acks.values.filter { $0.error != nil }.prefix(3))")
                // Each sender's own stream: 1...each.
                #expect(Set(acks.values.compactMap(\.streamOffset)) == Set((1...UInt64(each))), "\(user)'s own offsets")
            }
        }
        done.withLock { $0 = true }
        try await polling.value
        let offsets = seen.withLock { $0 }
        #expect(offsets == Array(1...UInt64(total)), "the reader saw \(offsets.count), first out of order at \(zip(offsets, 1...).first { $0.0 != UInt64($0.1) }.map { "\($0)" } ?? "-")")
        let bounds = try await reader.bounds(of: "zoe")
        #expect(bounds == StreamBounds(last: UInt64(total), first: 1))
        await reader.close()

        // zoe comes back through east: all 10,000, each sender's in the order sent.
        let (again, ok) = try await east.login("zoe")
        #expect(ok.syncStatus == .continued && ok.position?.offset == 0)
        var perSender: [String: [Int]] = [:]
        var offsetsReceived: [UInt64] = []
        while offsetsReceived.count < total {
            let delivery = try await again.nextDelivery(within: 10, "zoe's delivery \(offsetsReceived.count + 1)")
            offsetsReceived.append(delivery.streamOffset ?? 0)
            perSender[delivery.from, default: []].append(Int(delivery.messageID.split(separator: "-").last!)!)
        }
        #expect(offsetsReceived == Array(1...UInt64(total)))
        for (user, _) in senders { #expect(perSender[user] == Array(0..<each), "\(user)'s messages out of order") }
        await again.drop()
        await east.stop()
        await west.stop()
    }

    @Test("PostgreSQL stopped under a chat stream: chats are refused with a retry time, none is ACKed unstored, and the stream goes on once it is back")
    func postgresStopped() async throws {
        let postgres = try await TestPostgres.start()
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, archive: .postgres(postgres.url))
        let bob = try await gateway.device("bob")
        try await bob.send(.logout(Logout()))
        try await bob.closed()
        let alice = try await gateway.device("alice")
        var acked: Set<String> = []
        var refused: [String] = []
        var index = 0
        func chat() async throws -> Ack {
            index += 1
            let id = "m-\(index)"
            let ack = try await alice.chat(to: "bob", id: id, text: "message \(index)", within: 15)
            if ack.error == nil { acked.insert(id) } else { refused.append(id) }
            return ack
        }
        for _ in 0..<50 { #expect(try await chat().error == nil) }
        await postgres.stopServer()
        // Refused from now on, with a time to retry.
        for _ in 0..<10 {
            let ack = try await chat()
            #expect(ack.error == .storeUnavailable && (ack.retryAfter ?? 0) >= 1, "\(ack)")
        }
        #expect(try await gateway.metric("imgw_archive_available") == 0)
        try await postgres.startServer()
        // The first refused message, sent again until taken (the gateway holds the others
        // behind it); then the rest.
        var retry = refused
        refused = []
        let first = retry.removeFirst()
        var taken = false
        for _ in 0..<60 where !taken {
            let ack = try await alice.chat(to: "bob", id: first, text: "message \(first.dropFirst(2))", within: 15)
            taken = ack.error == nil
            if !taken { try await Task.sleep(for: .milliseconds(Int(ack.retryAfter ?? 500))) }
        }
        #expect(taken, "the stream did not go on after PostgreSQL came back")
        acked.insert(first)
        for id in retry {
            let ack = try await alice.chat(to: "bob", id: id, text: "message \(id.dropFirst(2))", within: 15)
            #expect(ack.error == nil, "\(id): \(ack)")
            if ack.error == nil { acked.insert(id) }
        }
        for _ in 0..<20 { #expect(try await chat().error == nil) }
        #expect(try await gateway.metric("imgw_archive_available") == 1)

        // What is stored is exactly what was ACKed.
        let reader = try await PostgresArchiveStore.open(url: postgres.url, logger: Self.logger)
        let stored = try await reader.read(stream: "bob", after: 0, through: .max, limit: 1_000)
        await reader.close()
        #expect(Set(stored.map(\.messageID)) == acked)
        #expect(stored.map(\.offset) == Array(1...UInt64(stored.count)))
        await gateway.stop()
    }
}
