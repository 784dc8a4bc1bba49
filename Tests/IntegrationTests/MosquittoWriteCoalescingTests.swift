import Foundation
import Mosquitto
import Synchronization
import Testing
import IMTestSupport

/// The packets of one flush leave together: gathered by the loop's writer and sent with one
/// write(2) on plain TCP, corked on TLS (OpenSSL writes its records itself). Nothing may
/// stay corked or unsent afterwards.
@Suite("Mosquitto: the packets of one flush leave together", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct MosquittoWriteCoalescingTests {
    @Test("packets queued in one loop turn all arrive, in order, a 600 kB one among them; no socket stays corked, nothing stays unsent",
          arguments: [false, true])
    func burst(tls: Bool) async throws {
        let pki = tls ? try await TLSTests.PKI.make() : nil
        defer { if let pki { try? FileManager.default.removeItem(at: pki.directory) } }
        let broker = try await Self.broker(pki)
        // The publisher on a loop of its own, so that its counters are the publisher's.
        let loop = MosquittoEventLoop(name: "coalescing-loop")
        TestResources.track {
            loop.shutdown()
            await loop.waitForStop()
        }
        let subscriber = Self.client(broker, pki)
        let publisher = Self.client(broker, pki, loop: loop)
        let inbox = try await connected(subscriber)
        try await publisher.connect()
        try await subscriber.subscribe("burst/#", qos: .atLeastOnce)

        let count = 400
        let large = 600_000
        let outcomes = Mutex((succeeded: 0, failed: 0))
        // One job on the loop: every publish is queued before the loop flushes the client.
        publisher.perform { client in
            for index in 0..<count {
                let payload = index == count / 2 ? [UInt8](repeating: UInt8(index % 251), count: large) : Array("\(index)".utf8)
                do {
                    try client.startPublish(topic: "burst/x", payload: payload, qos: .atLeastOnce) { result in
                        outcomes.withLock { if case .success = result { $0.succeeded += 1 } else { $0.failed += 1 } }
                    }
                } catch {
                    outcomes.withLock { $0.failed += 1 }
                }
            }
        }
        for index in 0..<count {
            let message = try await inbox.next(within: 20, "message \(index)")
            if index == count / 2 {
                #expect(message.payload.count == large)
                #expect(message.payload.allSatisfy { $0 == UInt8(index % 251) })
            } else {
                #expect(message.payloadString == "\(index)")
            }
        }
        try await publisher.publish(topic: "burst/done", string: "done", qos: .atLeastOnce)
        #expect(try await inbox.next(within: 10, "the last message").payloadString == "done")
        let final = outcomes.withLock { $0 }
        #expect(final.succeeded == count)
        #expect(final.failed == 0)
        let statistics = await loop.statistics()
        #expect(statistics.corkedSockets == 0)
        #expect(statistics.unsentBytes == 0)
        if tls {
            #expect(statistics.batchedWrites == 0, "TLS records are written by OpenSSL, corked")
        } else if MosquittoLibrary.internalsDisabled {
            #expect(!statistics.batchesIO, "MOSQUITTO_SWIFT_INTERNALS=off: libmosquitto writes for itself")
        } else {
            #expect(statistics.batchesIO, "libmosquitto 2.0's write slot is hooked on this platform")
            #expect(statistics.batchedWrites > 0)
        }
        await publisher.close()
        await subscriber.close()
    }

    @Test("400 QoS 0 packets queued in one job leave in one write(2), not 400",
          .enabled(if: !MosquittoLibrary.internalsDisabled, "batched writes are one of libmosquitto's internals, turned off"))
    func gathered() async throws {
        let broker = try await TestBroker.start()
        let loop = MosquittoEventLoop(name: "gathering-loop")
        TestResources.track {
            loop.shutdown()
            await loop.waitForStop()
        }
        let subscriber = makeClient(broker)
        let publisher = makeClient(broker, loop: loop)
        let inbox = try await connected(subscriber)
        try await publisher.connect()
        try await subscriber.subscribe("gather/#", qos: .atMostOnce)
        let before = await loop.statistics().batchedWrites
        let count = 400
        publisher.perform { client in
            for index in 0..<count {
                try? client.startPublish(topic: "gather/x", payload: Array("\(index)".utf8), qos: .atMostOnce) { _ in }
            }
        }
        for index in 0..<count {
            #expect(try await inbox.next(within: 10, "message \(index)").payloadString == "\(index)")
        }
        let statistics = await loop.statistics()
        #expect(statistics.batchesIO)
        // About 4 kB: one write(2) takes it all (a PINGREQ in between could add one).
        #expect(statistics.batchedWrites - before >= 1)
        #expect(statistics.batchedWrites - before <= 2, "\(statistics.batchedWrites - before) writes for \(count) packets")
        #expect(statistics.unsentBytes == 0)
        await publisher.close()
        await subscriber.close()
    }

    @Test("a lone publish is written at once: its socket is not left corked after the write", arguments: [QoS.atMostOnce, .atLeastOnce])
    func lonePublish(qos: QoS) async throws {
        let broker = try await TestBroker.start()
        let subscriber = makeClient(broker)
        let publisher = makeClient(broker)
        let inbox = try await connected(subscriber)
        try await publisher.connect()
        try await subscriber.subscribe("lone/#", qos: qos)
        for index in 0..<3 {
            try await publisher.publish(topic: "lone/x", string: "\(index)", qos: qos)
            #expect(await publisher.loop.statistics().corkedSockets == 0)
            #expect(try await inbox.next(within: 10, "lone message \(index)").payloadString == "\(index)")
        }
        await publisher.close()
        await subscriber.close()
    }

    private static func broker(_ pki: TLSTests.PKI?) async throws -> TestBroker {
        guard let pki else { return try await TestBroker.start() }
        var options = TestBroker.Options()
        options.listenerLines = [
            "cafile \(pki.path("ca.crt"))", "certfile \(pki.path("server.crt"))", "keyfile \(pki.path("server.key"))",
        ]
        return try await TestBroker.start(options)
    }

    private static func client(_ broker: TestBroker, _ pki: TLSTests.PKI?, loop: MosquittoEventLoop = .shared) -> MosquittoClient {
        makeClient(broker, loop: loop) {
            if let pki {
                $0.host = "localhost"
                $0.tls = .init(caFile: pki.path("ca.crt"))
            }
        }
    }
}
