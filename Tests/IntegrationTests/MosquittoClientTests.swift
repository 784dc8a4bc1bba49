import FaultProxy
import Foundation
import Mosquitto
import Synchronization
import Testing
import IMTestSupport

/// The Swift wrapper against a real mosquitto started per test.
@Suite("Mosquitto client against a real broker", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct MosquittoClientTests {
    @Test("round trip keeps payload and v5 properties", arguments: QoS.allCases)
    func roundTrip(qos: QoS) async throws {
        let broker = try await TestBroker.start()
        let subscriber = makeClient(broker)
        let publisher = makeClient(broker)
        let inbox = try await connected(subscriber)
        try await publisher.connect()
        let granted = try await subscriber.subscribe("rt/\(qos.rawValue)/#", qos: .exactlyOnce)
        #expect(granted == .exactlyOnce)

        let payload: [UInt8] = Array("héllo \(qos)".utf8) + [0, 1, 2, 255]
        let properties = MQTTProperties(
            userProperties: [UserProperty("sender", "alice"), UserProperty("k", "v1"), UserProperty("k", "v2")],
            contentType: "application/json",
            messageExpiryInterval: 300,
            responseTopic: "rt/replies",
            correlationData: [9, 8, 7],
            payloadIsUTF8: false)
        try await publisher.publish(topic: "rt/\(qos.rawValue)/x", payload: payload, qos: qos, properties: properties)

        let message = try await inbox.next(within: 10, "the published message")
        #expect(message.topic == "rt/\(qos.rawValue)/x")
        #expect(message.payload == payload)
        #expect(message.qos == qos)
        #expect(message.retain == false)
        #expect(message.dup == false)
        #expect(message.properties.userProperties == properties.userProperties)
        #expect(message.properties.contentType == "application/json")
        #expect(message.properties.responseTopic == "rt/replies")
        #expect(message.properties.correlationData == [9, 8, 7])
        #expect(message.properties.payloadIsUTF8 == false)
        // The broker counts expiry down; it arrives at most the original value.
        #expect((message.properties.messageExpiryInterval ?? 0) > 0)
        #expect((message.properties.messageExpiryInterval ?? 0) <= 300)
        await publisher.close()
        await subscriber.close()
    }

    @Test("receivesProperties off: the message arrives whole, without its v5 properties")
    func withoutProperties() async throws {
        let broker = try await TestBroker.start()
        let subscriber = makeClient(broker) { $0.receivesProperties = false }
        let publisher = makeClient(broker)
        let inbox = try await connected(subscriber)
        try await publisher.connect()
        try await subscriber.subscribe("np/#", qos: .atLeastOnce)
        let properties = MQTTProperties(userProperties: [UserProperty("sender", "alice")], contentType: "application/json")
        try await publisher.publish(topic: "np/x", payload: Array("{}".utf8), qos: .atLeastOnce, properties: properties)
        let message = try await inbox.next(within: 10, "the published message")
        #expect(message.topic == "np/x" && message.payload == Array("{}".utf8) && message.qos == .atLeastOnce)
        #expect(message.properties == MQTTProperties(), "not copied")
        await publisher.close()
        await subscriber.close()
    }

    @Test("startPublish: 500 publishes in flight together arrive in order; each completion returns once the broker has it",
          arguments: [QoS.atLeastOnce, .exactlyOnce])
    func pipelinedPublishes(qos: QoS) async throws {
        let broker = try await TestBroker.start()
        let subscriber = makeClient(broker)
        let publisher = makeClient(broker) { $0.maxInflightPublishes = 100 }
        let inbox = try await connected(subscriber)
        try await publisher.connect()
        try await subscriber.subscribe("pipe/#", qos: qos)
        var tickets: [MosquittoClient.PublishTicket] = []
        for index in 0..<500 {
            tickets.append(try await publisher.startPublish(topic: "pipe/x", payload: Array("\(index)".utf8), qos: qos))
        }
        for ticket in tickets { try await publisher.completion(of: ticket) }
        for index in 0..<500 {
            #expect(try await inbox.next(within: 10, "message \(index)").payloadString == "\(index)")
        }
        await publisher.close()
        await subscriber.close()
    }

    @Test("awaited publishes from 64 tasks all complete, past the 65,535 packet ids, on the loop's executor or not",
          arguments: [false, true])
    func awaitedPublishesPastPacketIDWrap(onLoop: Bool) async throws {
        let broker = try await TestBroker.start()
        let publisher = makeClient(broker) { $0.maxInflightPublishes = 64 }
        try await publisher.connect()
        let tasks = 64
        let each = 1_100  // 70,400 publishes: the packet ids wrap once
        let completed = Mutex(0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<tasks {
                // Isolated to the client, with a nonisolated await between publishes: the
                // shape of a caller that lost completions while the loop ran the jobs of
                // tasks preferring it without naming itself their task executor.
                let body: @Sendable () async throws -> Void = {
                    try await Self.publish(each, on: publisher, topic: "wrap/\(task)", completed: completed)
                }
                if onLoop {
                    group.addTask(executorPreference: publisher.loop.taskExecutor, operation: body)
                } else {
                    group.addTask(operation: body)
                }
            }
            try await group.waitForAll()
        }
        #expect(completed.withLock { $0 } == tasks * each)
        #expect(await publisher.inflightPublishes == 0)
        await publisher.close()
    }

    private static func publish(_ count: Int, on client: isolated MosquittoClient, topic: String, completed: borrowing Mutex<Int>) async throws {
        for index in 0..<count {
            await nonisolatedStep()
            try await client.publish(topic: topic, payload: Array("\(index)".utf8), qos: .atLeastOnce)
            completed.withLock { $0 += 1 }
        }
    }

    private nonisolated static func nonisolatedStep() async {}

    @Test("a publish started before the client closes fails at its completion with the reason")
    func pipelinedPublishFailsOnClose() async throws {
        let broker = try await TestBroker.start()
        let publisher = makeClient(broker)
        try await publisher.connect()
        await broker.stop()
        // The broker is gone: a QoS 1 publish cannot complete; closing the client ends it.
        let ticket = try? await publisher.startPublish(topic: "pipe/y", payload: [1], qos: .atLeastOnce)
        await publisher.close()
        if let ticket {
            await #expect(throws: MosquittoError.self) { try await publisher.completion(of: ticket) }
        }
    }

    @Test("MQTT 3.1.1 works and refuses v5 properties")
    func mqtt311() async throws {
        let broker = try await TestBroker.start()
        let client = makeClient(broker) { $0.protocolVersion = .v311 }
        let inbox = try await connected(client)
        try await client.subscribe("v3/t", qos: .atLeastOnce)
        try await client.publish(topic: "v3/t", string: "old school", qos: .atLeastOnce)
        #expect(try await inbox.next().payloadString == "old school")
        await #expect(throws: MosquittoError.self) {
            try await client.publish(topic: "v3/t", string: "x", properties: MQTTProperties(contentType: "text/plain"))
        }
        await client.close()
    }

    @Test("a retained message reaches a late subscriber, flagged retained")
    func retained() async throws {
        let broker = try await TestBroker.start()
        let publisher = makeClient(broker)
        try await publisher.connect()
        try await publisher.publish(topic: "presence/alice", string: "online", qos: .atLeastOnce, retain: true)
        await publisher.close()

        let late = makeClient(broker)
        let inbox = try await connected(late)
        try await late.subscribe("presence/+", qos: .atLeastOnce)
        let message = try await inbox.next(within: 10, "the retained message")
        #expect(message.payloadString == "online")
        #expect(message.retain)
        // Retain handling "do not send" suppresses it.
        let other = makeClient(broker)
        let otherInbox = try await connected(other)
        try await other.subscribe("presence/+", qos: .atLeastOnce, options: SubscribeOptions(retainHandling: .doNotSend))
        try await other.subscribe("marker", qos: .atLeastOnce)
        try await publishMarker(broker, topic: "marker")
        #expect(try await otherInbox.next().topic == "marker")
        await late.close()
        await other.close()
    }


    enum Ending: String, CaseIterable, Sendable {
        case abruptDrop, disconnectWithWill, normalDisconnect
    }

    @Test("will: published on abrupt drop and on v5 disconnect 0x04, not on a normal disconnect", arguments: Ending.allCases)
    func will(ending: Ending) async throws {
        let broker = try await TestBroker.start()
        let watcher = makeClient(broker)
        let inbox = try await connected(watcher)
        try await watcher.subscribe("status/#", qos: .atLeastOnce)

        let device = makeClient(broker) {
            $0.will = .init(
                topic: "status/dev1", payload: Array(#"{"status":"offline"}"#.utf8), qos: .atLeastOnce, retain: true,
                properties: MQTTProperties(userProperties: [UserProperty("sender", "dev1")], contentType: "application/json"))
        }
        let events = Collector(device.events)
        try await device.connect()
        #expect(try await events.next().isConnected(sessionPresent: false))
        switch ending {
        case .abruptDrop:
            await device.abort()
            #expect(try await events.next() == .disconnected(.aborted))
        case .disconnectWithWill:
            try await device.disconnect(reason: .disconnectWithWill)
            #expect(try await events.next() == .disconnected(.normal))
        case .normalDisconnect:
            try await device.disconnect()
            #expect(try await events.next() == .disconnected(.normal))
        }
        try await publishMarker(broker, topic: "status/marker")
        let first = try await inbox.next(within: 10, "the will or the marker")
        if ending == .normalDisconnect {
            #expect(first.topic == "status/marker", "a normal disconnect must not publish the will")
        } else {
            #expect(first.topic == "status/dev1")
            #expect(first.payloadString == #"{"status":"offline"}"#)
            #expect(first.properties.contentType == "application/json")
            #expect(first.properties[user: "sender"] == "dev1")
            #expect(try await inbox.next().topic == "status/marker")
        }
        await device.close()
        await watcher.close()
    }


    @Test("forgetsWillOnceConnected: the broker still publishes the will of the connection that sent it; a later connect sends none")
    func willForgottenOnceConnected() async throws {
        let broker = try await TestBroker.start()
        let watcher = makeClient(broker)
        let inbox = try await connected(watcher)
        try await watcher.subscribe("status/#", qos: .atLeastOnce)
        let device = makeClient(broker) {
            $0.will = .init(topic: "status/dev2", payload: Array("offline".utf8), qos: .atLeastOnce)
            $0.forgetsWillOnceConnected = true
        }
        try await device.connect()
        await device.abort()
        try await publishMarker(broker, topic: "status/marker-1")
        #expect(try await inbox.next(within: 10, "the will").topic == "status/dev2", "the broker has the will from CONNECT")
        #expect(try await inbox.next(within: 10, "marker 1").topic == "status/marker-1")
        // Connected again: the client had freed its copy, so this CONNECT carried none.
        try await device.connect()
        await device.abort()
        try await publishMarker(broker, topic: "status/marker-2")
        #expect(try await inbox.next(within: 10, "marker 2").topic == "status/marker-2", "a will was published after the second connection")
        await device.close()
        await watcher.close()
    }

    @Test("a persistent session receives what was published while it was away, in order")
    func persistentSession() async throws {
        let broker = try await TestBroker.start()
        let id = "persistent-\(UInt32.random(in: 0...UInt32.max))"
        let configure: (inout MosquittoClient.Configuration) -> Void = {
            $0.cleanStart = false
            $0.sessionExpiryInterval = 3600
        }
        let first = makeClient(broker, id: id, configure)
        let firstSession = try await first.connect()
        #expect(firstSession.sessionPresent == false)
        try await first.subscribe("inbox/bob", qos: .atLeastOnce)
        try await first.disconnect()
        await first.close()

        let sender = makeClient(broker)
        try await sender.connect()
        for index in 0..<50 {
            try await sender.publish(topic: "inbox/bob", string: "m\(index)", qos: .atLeastOnce)
        }
        await sender.close()

        let second = makeClient(broker, id: id, configure)
        let inbox = Collector(second.messages)
        let session = try await second.connect()
        #expect(session.sessionPresent, "session expiry must have been sent on CONNECT")
        for index in 0..<50 {
            #expect(try await inbox.next(within: 10, "queued message \(index)").payloadString == "m\(index)")
        }
        await second.close()
    }

    @Test("bad credentials are refused with a clear error")
    func badCredentials() async throws {
        var options = TestBroker.Options()
        options.users = ["alice": "secret"]
        let broker = try await TestBroker.start(options)

        let good = makeClient(broker) {
            $0.username = "alice"
            $0.password = "secret"
        }
        try await good.connect()
        await good.close()

        for protocolVersion in [MosquittoClient.ProtocolVersion.v5, .v311] {
            let bad = makeClient(broker) {
                $0.username = "alice"
                $0.password = "wrong"
                $0.protocolVersion = protocolVersion
            }
            let error = await #expect(throws: MosquittoError.self) { try await bad.connect() }
            #expect(error == .connectionRefused(.badUsernameOrPassword) || error == .connectionRefused(.notAuthorized))
            #expect(error.map { "\($0)" }?.contains("connection refused by broker") == true)
            #expect(await bad.state == .disconnected)
            await bad.close()
        }
    }

    @Test("publish while disconnected throws notConnected and queues nothing (no duplicate later)")
    func publishWhileDisconnected() async throws {
        let broker = try await TestBroker.start()
        let watcher = makeClient(broker)
        let inbox = try await connected(watcher)
        try await watcher.subscribe("dc/#", qos: .atLeastOnce)

        let client = makeClient(broker) {
            $0.cleanStart = false
            $0.sessionExpiryInterval = 600
        }
        await #expect(throws: MosquittoError.notConnected) {
            try await client.publish(topic: "dc/early", string: "never", qos: .atLeastOnce)
        }
        try await client.connect()
        try await client.disconnect()
        await #expect(throws: MosquittoError.notConnected) {
            try await client.publish(topic: "dc/away", string: "never", qos: .atLeastOnce)
        }
        try await client.connect()
        try await client.publish(topic: "dc/back", string: "once", qos: .atLeastOnce)
        try await client.publish(topic: "dc/marker", string: "end", qos: .atLeastOnce)
        let first = try await inbox.next()
        let second = try await inbox.next()
        #expect(first.topic == "dc/back")
        #expect(second.topic == "dc/marker")
        #expect(await inbox.pending.isEmpty)
        await client.close()
        await watcher.close()
    }

    @Test("connecting to a port with no broker fails with a clear error")
    func noBroker() async throws {
        let port = freePort()
        var configuration = MosquittoClient.Configuration(clientID: "nobody", host: "127.0.0.1", port: port)
        configuration.connectTimeout = 5
        let client = makeClient(configuration: configuration)
        let error = await #expect(throws: MosquittoError.self) { try await client.connect() }
        #expect(error.map { "\($0)" }?.isEmpty == false)
        #expect(await client.state == .disconnected)
        await client.close()
    }

    @Test("a client whose loop was shut down still answers: close and state return at once, connect fails with a clear error")
    func loopShutDown() async throws {
        let broker = try await TestBroker.start()
        let loop = MosquittoEventLoop(name: "ending-loop")
        let used = makeClient(broker, loop: loop)
        try await used.connect()
        let unused = makeClient(broker, loop: loop)
        loop.shutdown()
        // The loop runs until its last connected client is closed.
        #expect(await used.state == .connected)
        await used.close()
        await loop.waitForStop()
        // Jobs on a client of a stopped loop still run (they used to wait forever).
        await used.close()
        #expect(await used.state == .closed)
        #expect(await unused.state == .idle)
        let error = await #expect(throws: MosquittoError.self) { try await unused.connect() }
        #expect(error == .invalidState("its event loop was shut down"), "\(String(describing: error))")
        await #expect(throws: MosquittoError.notConnected) {
            try await unused.publish(topic: "t", string: "x", qos: .atLeastOnce)
        }
        await unused.close()
        #expect(await unused.state == .closed)
    }

    @Test("session takeover: the old connection learns at once that it lost the session")
    func takeover() async throws {
        let broker = try await TestBroker.start()
        let old = makeClient(broker, id: "same-device")
        let events = Collector(old.events)
        try await old.connect()
        _ = try await events.next()
        let new = makeClient(broker, id: "same-device")
        try await new.connect()
        // mosquitto 2.0.11 closes the old connection without DISCONNECT 0x8E (newer
        // brokers send it, which arrives as `.broker(.sessionTakenOver)`).
        let event = try await events.next(within: 10, "the takeover")
        switch event {
        case .disconnected(.broker(let reason)): #expect(reason == .sessionTakenOver)
        case .disconnected(.error(let code, _)): #expect(code == 7, "MOSQ_ERR_CONN_LOST")
        default: Issue.record("unexpected event \(event)")
        }
        #expect(await old.state == .disconnected)
        #expect(await new.state == .connected)
        await old.close()
        await new.close()
    }

    @Test("a QoS 1 publish whose connection ends before its PUBACK: its completion waits for the next connect, and cancelling the waiting task ends the wait with CancellationError")
    func completionCancelled() async throws {
        let broker = try await TestBroker.start()
        let proxy = try await FaultProxy.start(upstreamPort: broker.port)
        TestResources.track { await proxy.stop() }
        let client = makeClient(configuration: MosquittoClient.Configuration(clientID: "stalled-publisher", host: "127.0.0.1", port: proxy.port))
        let events = Collector(client.events)
        try await client.connect()
        _ = try await events.next()
        proxy.blackholeAll()
        let ticket = try await client.startPublish(topic: "stalled/1", payload: Array("x".utf8), qos: .atLeastOnce)
        let waiting = Task { try await client.completion(of: ticket) }
        proxy.cutAll()
        let event = try await events.next(within: 10, "the connection ending")
        guard case .disconnected = event else { throw TestError("expected the disconnection, got \(event)") }
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        await client.close()
    }

    @Test("with failsPublishesOnLoss, a QoS 1 publish whose connection ends before its PUBACK fails at once with the loss")
    func publishFailsOnLoss() async throws {
        let broker = try await TestBroker.start()
        let proxy = try await FaultProxy.start(upstreamPort: broker.port)
        TestResources.track { await proxy.stop() }
        var configuration = MosquittoClient.Configuration(clientID: "failing-publisher", host: "127.0.0.1", port: proxy.port)
        configuration.failsPublishesOnLoss = true
        let client = makeClient(configuration: configuration)
        try await client.connect()
        proxy.blackholeAll()
        let ticket = try await client.startPublish(topic: "stalled/1", payload: Array("x".utf8), qos: .atLeastOnce)
        let waiting = Task { try await client.completion(of: ticket) }
        proxy.cutAll()
        let outcome = await waiting.result
        guard case .failure(let error) = outcome, case .connectionLost = error as? MosquittoError else {
            Issue.record("expected connectionLost, got \(outcome)")
            await client.close()
            return
        }
        await client.close()
    }

    @Test("subscribe to several filters, unsubscribe stops delivery")
    func subscribeMany() async throws {
        let broker = try await TestBroker.start()
        let client = makeClient(broker)
        let inbox = try await connected(client)
        let results = try await client.subscribe([
            .init("a/#", qos: .atMostOnce), .init("b/+", qos: .exactlyOnce), .init("c", qos: .atLeastOnce, options: .init(noLocal: true)),
        ])
        #expect(results == [.granted(.atMostOnce), .granted(.exactlyOnce), .granted(.atLeastOnce)])
        try await client.publish(topic: "c", string: "own", qos: .atLeastOnce)  // no-local: not delivered back
        try await client.publish(topic: "b/1", string: "b", qos: .atLeastOnce)
        #expect(try await inbox.next().topic == "b/1")
        try await client.unsubscribe("b/+")
        try await client.publish(topic: "b/1", string: "b again", qos: .atLeastOnce)
        try await client.publish(topic: "a/x", string: "a", qos: .atLeastOnce)
        #expect(try await inbox.next().topic == "a/x")
        await client.close()
    }

    @Test("in-flight publishes are bounded; all complete")
    func boundedInflight() async throws {
        let broker = try await TestBroker.start()
        let receiver = makeClient(broker)
        let inbox = try await connected(receiver)
        try await receiver.subscribe("load", qos: .atLeastOnce)
        let sender = makeClient(broker) { $0.maxInflightPublishes = 8 }
        try await sender.connect()
        let count = 2_000
        let maxSeen = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<count {
                group.addTask {
                    try await sender.publish(topic: "load", string: "\(index)", qos: .atLeastOnce)
                    return await sender.inflightPublishes
                }
            }
            var maxSeen = 0
            for try await seen in group { maxSeen = max(maxSeen, seen) }
            return maxSeen
        }
        #expect(maxSeen <= 8)
        #expect(await sender.inflightPublishes == 0)
        var received = Set<String>()
        for _ in 0..<count { received.insert(try await inbox.next().payloadString) }
        #expect(received.count == count)
        await sender.close()
        await receiver.close()
    }
}
