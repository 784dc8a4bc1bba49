import Foundation
import Mosquitto
import Testing
import IMTestSupport

/// Thousands of clients on one loop thread (../shared/notes/libmosquitto.md: select-based
/// loops fail past descriptor 1024; undrained socketpairs leak kernel memory).
@Suite("Many clients on one event loop", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct ScaleTests {
    static let clientCount = Int(ProcessInfo.processInfo.environment["IMGW_SCALE_CLIENTS"] ?? "") ?? 2_000

    @Test("2,000 clients on one loop thread, each subscribed to its own topic, each receives its message")
    func manyClients() async throws {
        let count = Self.clientCount
        var options = TestBroker.Options()
        options.globalLines = ["max_connections -1"]
        let broker = try await TestBroker.start(options)
        let loop = MosquittoEventLoop(name: "scale-loop")
        defer { loop.shutdown() }

        let before = ProcessSnapshot.now()
        let clients = (0..<count).map { index in
            makeClient(broker, id: "scale-\(index)", loop: loop) {
                $0.keepalive = 60
                $0.connectTimeout = 30
            }
        }
        let inboxes = clients.map { Collector($0.messages) }
        // Connect and subscribe them, 32 at a time: mosquitto 2.0 listens with a backlog
        // of 100, and a handshake dropped from a full accept queue is retried only after a
        // second or more (other tests' brokers share the two cores).
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, client) in clients.enumerated() {
                if index >= 32 { try await group.next() }
                group.addTask {
                    try await client.connect()
                    try await client.subscribe("scale/\(index)", qos: .atLeastOnce)
                }
            }
            try await group.waitForAll()
        }
        let connected = ProcessSnapshot.now()
        let stats = await loop.statistics()
        #expect(stats.clients == count)
        #expect(stats.connectedSockets == count)
        // Descriptors past 1024 are the point: a select()-based loop would fail here.
        #expect(connected.maxDescriptor > 1024)

        let publisher = makeClient(broker)
        try await publisher.connect()
        for index in 0..<count {
            try await publisher.publish(topic: "scale/\(index)", string: "to \(index)", qos: .atLeastOnce)
        }
        for (index, inbox) in inboxes.enumerated() {
            let message = try await inbox.next(within: 30, "the message for client \(index)")
            #expect(message.topic == "scale/\(index)")
            #expect(message.payloadString == "to \(index)")
        }

        // Many publishes from every client: the socketpair backlog must stay bounded
        // (libmosquitto writes a byte per queued packet; undrained, it grows per packet).
        let rounds = 20
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, client) in clients.enumerated() {
                group.addTask {
                    for round in 0..<rounds {
                        try await client.publish(topic: "scale/\((index + 1) % count)", string: "r\(round)", qos: .atLeastOnce)
                    }
                }
            }
            try await group.waitForAll()
        }
        for inbox in inboxes {
            for _ in 0..<rounds { _ = try await inbox.next(within: 30, "round message") }
        }
        let after = await loop.statistics()
        let fdsPerClient = Double(connected.descriptors - before.descriptors) / Double(count)
        let rssPerClient = Double(connected.rssKiB - before.rssKiB) / Double(count)
        print("""
            scale: \(count) clients on one loop thread; \(String(format: "%.2f", fdsPerClient)) descriptors per client \
            (\(connected.descriptors) open, highest \(connected.maxDescriptor)); \
            RSS \(String(format: "%.1f", rssPerClient)) KiB per client (process \(connected.rssKiB) KiB, test harness included); \
            socketpair backlog after \(count * (rounds + 1)) publishes: total \(after.socketPairBacklogBytes) B, \
            max \(after.maxSocketPairBacklogBytes) B per client
            """)
        // libmosquitto 2.0 opens a socketpair per handle and writes a byte into it for each
        // packet it queues; the loop takes the pair away from the handle and closes it, so
        // a client holds only its TCP socket and nothing piles up in a pair.
        #expect(fdsPerClient <= 1.05, "one descriptor per client: the TCP socket (the socketpair is detached and closed)")
        #expect(after.socketPairBacklogBytes == 0)
        #expect(await clients[0].socketPairBacklog == nil, "no socketpair left to drain")

        try await withThrowingTaskGroup(of: Void.self) { group in
            for client in clients {
                group.addTask { await client.close() }
            }
            try await group.waitForAll()
        }
        await publisher.close()
        #expect(await loop.statistics().clients == 0)
        let closed = ProcessSnapshot.now()
        // Other tests open and close descriptors meanwhile; a leak here would be 3 per client.
        #expect(closed.descriptors < before.descriptors + count / 2, "closing releases every descriptor")
    }
}

/// Open descriptors and resident memory of this process.
struct ProcessSnapshot {
    var descriptors: Int
    var maxDescriptor: Int
    var rssKiB: Int

    static func now() -> ProcessSnapshot {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        let numbers = fds.compactMap(Int.init)
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let rss = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }
            .flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
        return ProcessSnapshot(descriptors: numbers.count, maxDescriptor: numbers.max() ?? 0, rssKiB: rss)
    }
}
