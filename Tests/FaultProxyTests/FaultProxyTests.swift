import FaultProxy
import NIOCore
import Testing

/// The proxy against a real echo server, over loopback, with real clients.
@Suite("FaultProxy", .timeLimit(.minutes(2)))
struct FaultProxyTests {
    let clock = ContinuousClock()

    // MARK: Forwarding

    @Test("bytes pass unchanged both ways, 1 MiB in chunks in order")
    func passThrough() async throws {
        try await withProxy { proxy, _ in
            let client = try await TestClient.connect(port: proxy.port)
            #expect(try await roundTrip(client, Array("hello".utf8)) == Array("hello".utf8))
            let big = pattern(1 << 20, salt: 7)
            #expect(try await roundTrip(client, big, chunk: 16 * 1024) == big)
            await client.close()
        }
    }

    @Test("an upstream named by host name (localhost: maybe ::1 first, then 127.0.0.1)")
    func upstreamByName() async throws {
        let server = try await TestServer.start()
        let proxy = try await FaultProxy.start(upstreamHost: "localhost", upstreamPort: server.port)
        let client = try await TestClient.connect(port: proxy.port)
        #expect(try await roundTrip(client, pattern(100_000)) == pattern(100_000))
        await client.close()
        await proxy.stop()
        await server.stop()
    }

    @Test("several upstreams: connections spread over those that accept, one that refuses is skipped, every round trip passes")
    func loadBalancer() async throws {
        let first = try await TestServer.start()
        let second = try await TestServer.start()
        let closed = try ClosedPort()
        let proxy = try await FaultProxy.start(
            upstreams: [.init(port: first.port), .init(port: closed.port), .init(port: second.port)], seed: 7)
        for index in 0..<30 {
            let client = try await TestClient.connect(port: proxy.port)
            #expect(try await roundTrip(client, pattern(1_000, salt: index)) == pattern(1_000, salt: index))
            await client.close()
        }
        #expect(first.counts.accepted + second.counts.accepted == 30)
        #expect(first.counts.accepted > 0 && second.counts.accepted > 0, "\(first.counts) \(second.counts)")
        let statistics = try await proxy.waitForStatistics { $0.connectionsOpen == 0 }
        #expect(statistics.upstreamConnectFailures > 0, "the refusing upstream was drawn and skipped")
        await #expect(throws: FaultProxyError.noUpstream) { try await FaultProxy.start(upstreams: []) }
        await proxy.stop()
        await first.stop()
        await second.stop()
        withExtendedLifetime(closed) {}
    }

    @Test("many connections at once stay apart")
    func manyConnections() async throws {
        try await withProxy { proxy, _ in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0 ..< 8 {
                    group.addTask {
                        let client = try await TestClient.connect(port: proxy.port)
                        let bytes = pattern(64 * 1024, salt: index)
                        #expect(try await roundTrip(client, bytes, chunk: 4096) == bytes)
                        await client.close()
                    }
                }
                try await group.waitForAll()
            }
            let statistics = try await proxy.waitForStatistics { $0.connectionsOpen == 0 }
            #expect(statistics.connectionsAccepted == 8)
        }
    }

    @Test("latency 100...200 ms: a round trip takes at least 200 ms, order is kept")
    func latency() async throws {
        let profile = FaultProfile(latency: .milliseconds(100) ... .milliseconds(200))
        try await withProxy(profile: profile) { proxy, _ in
            let client = try await TestClient.connect(port: proxy.port)
            let start = clock.now
            #expect(try await roundTrip(client, [1, 2, 3]) == [1, 2, 3])
            let elapsed = clock.now - start
            #expect(elapsed >= .milliseconds(200))
            #expect(elapsed < .seconds(10))

            // Many small writes, each with its own random latency: none may overtake another.
            let count = 200
            for number in 0 ..< count { try await client.send(bigEndian(number)) }
            let echoed = try await client.read(count: 4 * count)
            #expect(echoed == (0 ..< count).flatMap(bigEndian))
            await client.close()
        }
    }

    @Test("a bandwidth limit slows a transfer down")
    func bandwidth() async throws {
        let profile = FaultProfile(bandwidth: 200_000)
        try await withProxy(profile: profile) { proxy, _ in
            let client = try await TestClient.connect(port: proxy.port)
            let bytes = pattern(100_000)
            let start = clock.now
            #expect(try await roundTrip(client, bytes) == bytes)
            // 0.5 s each way at 200 kB/s; the two directions overlap.
            #expect(clock.now - start >= .milliseconds(450))
            await client.close()
        }
    }

    @Test("setProfile reaches an open connection")
    func setProfileAppliesToOpenConnections() async throws {
        try await withProxy { proxy, _ in
            let client = try await TestClient.connect(port: proxy.port)
            #expect(try await roundTrip(client, [1]) == [1])
            proxy.setProfile(FaultProfile(latency: .milliseconds(300) ... .milliseconds(300)))
            // The profile reaches the connection on its event loop a moment later: the first
            // round trip may still be fast, a later one must take 2 x 300 ms.
            var slow = false
            for _ in 0 ..< 20 where !slow {
                let start = clock.now
                #expect(try await roundTrip(client, [2]) == [2])
                slow = clock.now - start >= .milliseconds(600)
            }
            #expect(slow)
            #expect(proxy.profile.latency == .milliseconds(300) ... .milliseconds(300))
            await client.close()
        }
    }

    @Test("when the upstream closes, what it sent first still arrives, then the close")
    func closeAfterQueuedData() async throws {
        let bytes = pattern(200_000, salt: 3)
        let profile = FaultProfile(latency: .milliseconds(50) ... .milliseconds(150))
        try await withProxy(.sendThenClose(bytes), profile: profile) { proxy, _ in
            let client = try await TestClient.connect(port: proxy.port)
            #expect(try await client.read(count: bytes.count) == bytes)
            #expect(try await client.closeReason() == .closed)
            _ = try await proxy.waitForStatistics { $0.connectionsOpen == 0 }
        }
    }

    @Test("when the client closes, what it sent first still reaches the upstream, then the close")
    func clientCloseAfterQueuedData() async throws {
        let bytes = pattern(300_000, salt: 5)
        let profile = FaultProfile(latency: .milliseconds(50) ... .milliseconds(150))
        try await withProxy(.collect, profile: profile) { proxy, server in
            let client = try await TestClient.connect(port: proxy.port)
            for offset in stride(from: 0, to: bytes.count, by: 10_000) {
                try await client.send(Array(bytes[offset ..< offset + 10_000]))
            }
            await client.close()
            var connections = server.received.makeAsyncIterator()
            #expect(await connections.next() == bytes)
            _ = try await proxy.waitForStatistics { $0.connectionsOpen == 0 }
        }
    }

    @Test("an upstream that is not there: the client's connection is closed")
    func upstreamDown() async throws {
        let closed = try ClosedPort()
        let proxy = try await FaultProxy.start(upstreamPort: closed.port)
        let client = try await TestClient.connect(port: proxy.port)
        let reason = try await client.closeReason()
        let statistics = try await proxy.waitForStatistics { $0.connectionsOpen == 0 }
        #expect(statistics.upstreamConnectFailures == 1, "\(reason) \(statistics)")
        #expect(statistics.connectionsAccepted == 1)
        await proxy.stop()
        withExtendedLifetime(closed) {}
    }

    @Test("a client that does not read holds the proxy back (bounded buffering), then gets it all")
    func backpressure() async throws {
        let bytes = pattern(16 << 20, salt: 11)
        try await withProxy(.sendThenClose(bytes)) { proxy, _ in
            let client = try await TestClient.connect(port: proxy.port, reading: false)
            _ = try await proxy.waitForStatistics { $0.bytesDownstream > 0 }
            // Nothing to await for "it stopped": give it time to overrun if it would. The
            // kernel's buffers take about 4 MiB here; an unbounded proxy would pass all 16.
            try await Task.sleep(for: .milliseconds(500))
            #expect(proxy.statistics.bytesDownstream < 10 << 20)
            try await client.startReading()
            #expect(try await client.read(count: bytes.count) == bytes)
        }
    }

    // MARK: Blackholes

    @Test("blackholeAll: an open connection goes silent and stays open; a new one passes")
    func blackholeAll() async throws {
        try await withProxy { proxy, server in
            let old = try await TestClient.connect(port: proxy.port)
            #expect(try await roundTrip(old, [1, 2]) == [1, 2])

            proxy.blackholeAll()
            try await old.send([3, 4])
            await #expect(throws: TestClientError.timedOut(received: 0)) {
                try await old.read(count: 1, timeout: .seconds(1))
            }
            #expect(old.isOpen)

            let new = try await TestClient.connect(port: proxy.port)
            #expect(try await roundTrip(new, [5, 6]) == [5, 6])
            // The old connection's upstream side is still open too: nothing was closed.
            #expect(server.counts == .init(accepted: 2, open: 2))
            #expect(old.isOpen)
            try await old.send([7])
            await #expect(throws: TestClientError.timedOut(received: 0)) {
                try await old.read(count: 1, timeout: .milliseconds(300))
            }

            let statistics = proxy.statistics
            #expect(statistics.blackholed == 1)
            #expect(statistics.bytesDiscarded == 3)
            #expect(statistics.connectionsOpen == 2)
            await old.close()
            await new.close()
        }
    }

    @Test("blackholeNew: new connections look connected and pass nothing, until turned off")
    func blackholeNew() async throws {
        try await withProxy { proxy, server in
            let before = try await TestClient.connect(port: proxy.port)
            #expect(try await roundTrip(before, [1]) == [1])

            proxy.blackholeNew(true)
            let silent = try await TestClient.connect(port: proxy.port)
            try await silent.send([2, 3, 4])
            await #expect(throws: TestClientError.timedOut(received: 0)) {
                try await silent.read(count: 1, timeout: .seconds(1))
            }
            #expect(silent.isOpen)
            #expect(try await roundTrip(before, [5]) == [5])   // older connections unaffected
            #expect(server.counts.accepted == 1)                // the upstream never saw it

            proxy.blackholeNew(false)
            let after = try await TestClient.connect(port: proxy.port)
            #expect(try await roundTrip(after, [6]) == [6])
            #expect(silent.isOpen)
            #expect(proxy.statistics.blackholed == 1)

            await silent.close()
            _ = try await proxy.waitForStatistics { $0.connectionsOpen == 2 }
            await before.close()
            await after.close()
        }
    }

    // MARK: Holds

    @Test("holdAll: open and new connections go silent and stay open, then get everything, in order")
    func holdAll() async throws {
        try await withProxy { proxy, _ in
            let old = try await TestClient.connect(port: proxy.port)
            #expect(try await roundTrip(old, [1, 2]) == [1, 2])

            proxy.holdAll(true)
            try await old.send([3, 4])
            await #expect(throws: TestClientError.timedOut(received: 0)) {
                try await old.read(count: 1, timeout: .seconds(1))
            }
            #expect(old.isOpen)
            let new = try await TestClient.connect(port: proxy.port)
            try await new.send([5])
            try await old.send([6])
            await #expect(throws: TestClientError.timedOut(received: 0)) {
                try await new.read(count: 1, timeout: .milliseconds(300))
            }

            proxy.holdAll(false)
            #expect(try await old.read(count: 3) == [3, 4, 6])
            #expect(try await new.read(count: 1) == [5])
            #expect(try await roundTrip(old, [7]) == [7])
            let statistics = proxy.statistics
            #expect(statistics.bytesDiscarded == 0)
            #expect(statistics.blackholed == 0)
            #expect(statistics.connectionsOpen == 2)
            await old.close()
            await new.close()
        }
    }

    @Test("holdAll suspends cuts: a connection held from its start is cut only after the hold")
    func holdSuspendsCuts() async throws {
        let profile = FaultProfile(cutsPerMinute: 600)   // one every 100 ms on average
        try await withProxy(profile: profile, seed: 42) { proxy, _ in
            proxy.holdAll(true)
            let client = try await TestClient.connect(port: proxy.port)
            try await client.send([1])
            await #expect(throws: TestClientError.timedOut(received: 0)) {
                try await client.read(count: 1, timeout: .seconds(1))
            }
            #expect(client.isOpen)
            #expect(proxy.statistics.cuts == 0)

            proxy.holdAll(false)
            #expect(try await client.closeReason(timeout: .seconds(30)) == .reset)
            #expect(proxy.statistics.cuts == 1)
        }
    }

    // MARK: Cuts and refusals

    @Test("cutAll: clients see their connections reset promptly; new ones pass")
    func cutAll() async throws {
        try await withProxy { proxy, _ in
            let first = try await TestClient.connect(port: proxy.port)
            let second = try await TestClient.connect(port: proxy.port)
            #expect(try await roundTrip(first, [1]) == [1])
            #expect(try await roundTrip(second, [2]) == [2])

            proxy.cutAll()
            // "Promptly": no heartbeat or timeout is involved, only the loaded machine.
            #expect(try await first.closeReason(timeout: .seconds(20)) == .reset)
            #expect(try await second.closeReason(timeout: .seconds(20)) == .reset)

            let statistics = try await proxy.waitForStatistics { $0.connectionsOpen == 0 }
            #expect(statistics.cuts == 2)

            let third = try await TestClient.connect(port: proxy.port)
            #expect(try await roundTrip(third, [3]) == [3])
            await third.close()
        }
    }

    @Test("refuseNew: new connections are reset at once, open ones go on; then accepted again")
    func refuseNew() async throws {
        try await withProxy { proxy, server in
            let open = try await TestClient.connect(port: proxy.port)
            #expect(try await roundTrip(open, [1]) == [1])

            proxy.refuseNew(true)
            do {
                let refused = try await TestClient.connect(port: proxy.port)
                let reason = try await refused.closeReason(timeout: .seconds(5))
                #expect(reason == .reset || reason == .closed)
            } catch let error as TestClientError {
                Issue.record("the refused connection stayed open: \(error)")
            } catch {
                // The connect itself failed: refused as well.
            }
            #expect(try await roundTrip(open, [2]) == [2])
            #expect(proxy.statistics.connectionsRefused == 1)
            #expect(server.counts.accepted == 1)

            proxy.refuseNew(false)
            let later = try await TestClient.connect(port: proxy.port)
            #expect(try await roundTrip(later, [3]) == [3])
            await open.close()
            await later.close()
        }
    }

    @Test("a high cut rate cuts connections")
    func randomCuts() async throws {
        let profile = FaultProfile(cutsPerMinute: 600)   // one every 100 ms on average
        try await withProxy(profile: profile, seed: 42) { proxy, _ in
            let client = try await TestClient.connect(port: proxy.port)
            #expect(try await client.closeReason(timeout: .seconds(30)) == .reset)
            let statistics = try await proxy.waitForStatistics { $0.connectionsOpen == 0 }
            #expect(statistics.cuts == 1)
        }
    }

    // MARK: Stalls

    @Test("stalls delay data but deliver all of it intact and in order")
    func stalls() async throws {
        let profile = FaultProfile(stallsPerMinute: 600, stallDuration: .milliseconds(50) ... .milliseconds(150))
        try await withProxy(profile: profile, seed: 7) { proxy, _ in
            let client = try await TestClient.connect(port: proxy.port)
            var rounds = 0
            var longest = Duration.zero
            while (proxy.statistics.stalls < 3 || rounds < 10) && rounds < 1000 {
                let bytes = pattern(8 * 1024, salt: rounds)
                let start = clock.now
                #expect(try await roundTrip(client, bytes) == bytes)
                longest = max(longest, clock.now - start)
                rounds += 1
            }
            #expect(proxy.statistics.stalls >= 3)
            #expect(longest >= .milliseconds(10))
            let big = pattern(512 * 1024, salt: 99)
            #expect(try await roundTrip(client, big, chunk: 32 * 1024) == big)
            #expect(client.isOpen)
            await client.close()
        }
    }

    // MARK: Statistics and stopping

    @Test("statistics count connections and bytes")
    func statistics() async throws {
        try await withProxy { proxy, _ in
            let client = try await TestClient.connect(port: proxy.port)
            #expect(try await roundTrip(client, pattern(1000)) == pattern(1000))
            let during = proxy.statistics
            #expect(during.connectionsAccepted == 1)
            #expect(during.connectionsOpen == 1)
            #expect(during.bytesUpstream == 1000)
            #expect(during.bytesDownstream == 1000)
            await client.close()
            let after = try await proxy.waitForStatistics { $0.connectionsOpen == 0 }
            var expected = FaultProxy.Statistics()
            expected.connectionsAccepted = 1
            expected.bytesUpstream = 1000
            expected.bytesDownstream = 1000
            #expect(after == expected)
        }
    }

    @Test("waitForStatistics times out with the last statistics")
    func waitTimesOut() async throws {
        try await withProxy { proxy, _ in
            await #expect(throws: FaultProxyError.timedOut(FaultProxy.Statistics())) {
                try await proxy.waitForStatistics(timeout: .milliseconds(200)) { $0.connectionsAccepted > 0 }
            }
        }
    }

    @Test("stop closes the listener and every connection")
    func stop() async throws {
        let server = try await TestServer.start()
        let proxy = try await FaultProxy.start(upstreamPort: server.port)
        let first = try await TestClient.connect(port: proxy.port)
        let second = try await TestClient.connect(port: proxy.port)
        #expect(try await roundTrip(first, [1]) == [1])
        #expect(try await roundTrip(second, [2]) == [2])

        await proxy.stop()
        #expect(try await first.closeReason() == .closed)
        #expect(try await second.closeReason() == .closed)
        #expect(proxy.statistics.connectionsOpen == 0)
        // The port is free now (the system refuses, unless another listener took it):
        // either way the proxy accepts nothing more.
        if let late = try? await TestClient.connect(port: proxy.port) { await late.close() }
        #expect(proxy.statistics.connectionsAccepted == 2)
        await proxy.stop()   // a second stop does nothing
        await server.stop()
    }
}
