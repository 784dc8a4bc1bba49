import Mosquitto
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
import IMTestSupport
#endif

/// The callback API of `MosquittoClient`, for event-driven callers that must not suspend:
/// `perform(_:)`, `deliverMessages(to:)`, `reportEvents(to:)` and
/// `startPublish(topic:payload:qos:retain:properties:completion:)`, against a real mosquitto.
@Suite("MosquittoClient callbacks against a real broker", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct MosquittoCallbackTests {
    /// What a completion was called with, tagged with the publish it belongs to.
    typealias Outcome = (tag: String, result: Result<Void, MosquittoError>, onLoop: Bool)

    /// Values appended from any thread.
    final class Recorder<Value: Sendable>: Sendable {
        private let values = Mutex<[Value]>([])
        func append(_ value: Value) { values.withLock { $0.append(value) } }
        var all: [Value] { values.withLock { $0 } }
    }

    private func persistent(_ broker: TestBroker, _ id: String) -> MosquittoClient {
        makeClient(broker, id: id) {
            $0.cleanStart = false
            $0.sessionExpiryInterval = 600
            $0.acknowledgement = .manual
        }
    }

    /// Hands `client`'s messages to a handler that answers `handling`; returns what it got.
    private func handledMessages(_ client: MosquittoClient, answering handling: MosquittoClient.Handling) async -> Collector<MosquittoMessage> {
        let (messages, sink) = AsyncStream.makeStream(of: MosquittoMessage.self)
        await client.deliverMessages { message in
            sink.yield(message)
            return handling
        }
        return Collector(messages)
    }

    /// Starts a QoS 1 publish with a completion; returns what the completion gets.
    private func startProbe(_ client: MosquittoClient, tag: String = "probe") async throws -> Collector<Outcome> {
        let (outcomes, sink) = AsyncStream.makeStream(of: Outcome.self)
        let loop = client.loop
        try await client.startPublish(topic: "probe/\(tag)", payload: Array(tag.utf8), qos: .atLeastOnce, completion: { result in
            sink.yield((tag, result, loop.inLoop))
        })
        return Collector(outcomes)
    }

    private static func isSuccess(_ result: Result<Void, MosquittoError>) -> Bool {
        if case .success = result { true } else { false }
    }

    // MARK: perform

    @Test("perform runs each body isolated on the client's loop thread, in the order submitted")
    func performInOrder() async throws {
        let broker = try await TestBroker.start()
        let client = makeClient(broker)
        try await client.connect()
        let count = 1_000
        let order = Recorder<Int>()
        let offLoop = Recorder<Int>()
        let states = Recorder<MosquittoClient.State>()
        let (done, doneSink) = AsyncStream.makeStream(of: Void.self)
        let finished = Collector(done)
        let loop = client.loop
        for index in 0..<count {
            client.perform { client in
                if !loop.inLoop { offLoop.append(index) }
                states.append(client.state)  // isolated: read synchronously
                order.append(index)
                if index == count - 1 { doneSink.yield() }
            }
        }
        try await finished.next(within: 10, "the last body")
        #expect(order.all == Array(0..<count), "bodies ran out of order (or not all of them)")
        #expect(offLoop.all.isEmpty, "bodies ran off the loop thread: \(offLoop.all.prefix(5))")
        #expect(states.all.allSatisfy { $0 == .connected })
        await client.close()
    }

    // MARK: deliverMessages

    @Test("deliverMessages: messages go to the handler on the loop thread, in arrival order, not to `messages`; nil goes back to `messages`")
    func messagesGoToHandler() async throws {
        let broker = try await TestBroker.start()
        let sender = makeClient(broker)
        try await sender.connect()
        let client = makeClient(broker)
        let stream = Collector(client.messages)
        // nil: a barrier the test sends itself.
        let (handled, sink) = AsyncStream.makeStream(of: (message: MosquittoMessage?, onLoop: Bool).self)
        let handler = Collector(handled)
        let loop = client.loop
        await client.deliverMessages { message in
            sink.yield((message, loop.inLoop))
            return .now
        }
        try await client.connect()
        try await client.subscribe("cb/#", qos: .atLeastOnce)
        let count = 50
        for index in 0..<count {
            try await sender.publish(topic: "cb/x", string: "m\(index)", qos: .atLeastOnce)
        }
        for index in 0..<count {
            let (message, onLoop) = try await handler.next(within: 10, "message \(index) at the handler")
            #expect(message?.payloadString == "m\(index)")
            #expect(message?.qos == .atLeastOnce)
            #expect(onLoop, "the handler runs on the loop thread")
        }

        await client.deliverMessages(to: nil)
        try await sender.publish(topic: "cb/x", string: "back to the stream", qos: .atLeastOnce)
        let first = try await stream.next(within: 10, "the message after the handler was removed")
        #expect(first.payloadString == "back to the stream", "the stream must not have received the handled messages")
        sink.yield((nil, false))
        #expect(try await handler.next(within: 10, "the barrier").message == nil, "the removed handler got a message")
        await client.close()
        await sender.close()
    }

    @Test("a client made without streams: `messages` and `events` end at once; the handlers get every message and event")
    func withoutStreams() async throws {
        let broker = try await TestBroker.start()
        let sender = makeClient(broker)
        try await sender.connect()
        let base = makeClient(broker)
        let client = MosquittoClient(configuration: base.configuration, loop: base.loop, streams: false)
        TestResources.track { await client.close() }
        // Bounded: a stream that is not finished fails the test instead of hanging it.
        #expect(await Collector(client.messages).finishes(within: 5), "messages is finished and empty")
        #expect(await Collector(client.events).finishes(within: 5), "events is finished and empty")
        let (handled, sink) = AsyncStream.makeStream(of: String.self)
        let messages = Collector(handled)
        let (reported, eventSink) = AsyncStream.makeStream(of: MosquittoClient.Event.self)
        let events = Collector(reported)
        await client.deliverMessages { message in
            sink.yield(message.payloadString ?? "")
            return .now
        }
        await client.reportEvents { eventSink.yield($0) }
        try await client.connect()
        guard case .connected = try await events.next(within: 10, "connected") else {
            Issue.record("the first event was not connected")
            return
        }
        try await client.subscribe("nostreams/#", qos: .atLeastOnce)
        for index in 0..<20 {
            try await sender.publish(topic: "nostreams/x", string: "m\(index)", qos: .atLeastOnce)
        }
        for index in 0..<20 {
            #expect(try await messages.next(within: 10, "message \(index)") == "m\(index)")
        }
        await client.abort()
        guard case .disconnected = try await events.next(within: 10, "disconnected") else {
            Issue.record("the abort was not reported")
            return
        }
        await client.close()
        await sender.close()
    }

    @Test("manual acknowledgement: a handler answering .later holds the PUBACK; unacknowledged the message is redelivered after abort and reconnect, acknowledged it is not")
    func laterHoldsUntilAcknowledged() async throws {
        let broker = try await TestBroker.start()
        let sender = makeClient(broker)
        try await sender.connect()
        let id = "later-\(UInt32.random(in: 0...UInt32.max))"
        let topic = "inbox/later"

        // First connection: the handler keeps the message for later and never acknowledges it.
        let first = persistent(broker, id)
        let firstInbox = await handledMessages(first, answering: .later)
        try await first.connect()
        try await first.subscribe(topic, qos: .atLeastOnce)
        try await sender.publish(topic: topic, string: "m1", qos: .atLeastOnce)
        let m1 = try await firstInbox.next(within: 10, "m1")
        #expect(m1.payloadString == "m1")
        #expect(m1.dup == false)
        #expect(await first.unacknowledgedCount == 1, ".later leaves the message to acknowledge(_:)")
        // Our own publish queues behind the held PUBACK: it cannot reach the broker.
        let heldProbe = try await startProbe(first, tag: "held")
        await first.abort()  // what kill -9 does: nothing queued leaves
        await first.close()
        let held = try await heldProbe.next(within: 10, "the held probe's completion")
        #expect(!Self.isSuccess(held.result), "the probe completed: the writes were not held")

        // Second connection: the broker redelivers m1; this time the handler's message is acknowledged.
        let second = persistent(broker, id)
        let secondInbox = await handledMessages(second, answering: .later)
        #expect(try await second.connect().sessionPresent)
        let again = try await secondInbox.next(within: 10, "the redelivered m1")
        #expect(again.payloadString == "m1")
        #expect(again.dup == MosquittoLibrary.internals.contains(.dupFlag), "a redelivery carries the DUP flag (read through libmosquitto's internals)")
        #expect(await second.unacknowledgedCount == 1)
        await second.acknowledge(again)
        #expect(await second.unacknowledgedCount == 0)
        // The out-queue is FIFO: once this publish completes, the PUBACK queued before it has left.
        let releasedProbe = try await startProbe(second, tag: "released")
        let released = try await releasedProbe.next(within: 10, "the probe after acknowledge")
        #expect(Self.isSuccess(released.result), "acknowledge(_:) must release the held writes: \(released.result)")
        await second.abort()
        await second.close()

        // Third connection: m1 was acknowledged, so the marker is the first thing delivered.
        let third = persistent(broker, id)
        let thirdInbox = await handledMessages(third, answering: .now)
        #expect(try await third.connect().sessionPresent)
        try await sender.publish(topic: topic, string: "marker", qos: .atLeastOnce)
        let next = try await thirdInbox.next(within: 10, "the marker")
        #expect(next.payloadString == "marker", "an acknowledged message came back: \(next.payloadString)")
        await third.close()
        await sender.close()
    }

    @Test("manual acknowledgement: a handler answering .now does not hold the PUBACK; the message is not redelivered after abort")
    func nowDoesNotHold() async throws {
        let broker = try await TestBroker.start()
        let sender = makeClient(broker)
        try await sender.connect()
        let id = "now-\(UInt32.random(in: 0...UInt32.max))"
        let topic = "inbox/now"

        let first = persistent(broker, id)
        let firstInbox = await handledMessages(first, answering: .now)
        try await first.connect()
        try await first.subscribe(topic, qos: .atLeastOnce)
        try await sender.publish(topic: topic, string: "m1", qos: .atLeastOnce)
        #expect(try await firstInbox.next(within: 10, "m1").payloadString == "m1")
        #expect(await first.unacknowledgedCount == 0, ".now needs no acknowledge(_:)")
        // Writes are not held: a publish queued after the PUBACK completes (and so the PUBACK left).
        let probe = try await startProbe(first)
        let outcome = try await probe.next(within: 10, "the probe's completion")
        #expect(Self.isSuccess(outcome.result), "the probe did not complete: the writes were held (\(outcome.result))")
        await first.abort()
        await first.close()

        let second = persistent(broker, id)
        let secondInbox = await handledMessages(second, answering: .now)
        #expect(try await second.connect().sessionPresent)
        try await sender.publish(topic: topic, string: "marker", qos: .atLeastOnce)
        let next = try await secondInbox.next(within: 10, "the marker")
        #expect(next.payloadString == "marker", "a message handled with .now was redelivered: \(next.payloadString)")
        await second.close()
        await sender.close()
    }

    // MARK: reportEvents

    @Test("reportEvents: connected and disconnected (abort) go to the handler on the loop thread, not to `events`; nil goes back to `events`")
    func eventsGoToHandler() async throws {
        let broker = try await TestBroker.start()
        let client = makeClient(broker)
        let stream = Collector(client.events)
        // nil: a barrier the test sends itself.
        let (handled, sink) = AsyncStream.makeStream(of: (event: MosquittoClient.Event?, onLoop: Bool).self)
        let handler = Collector(handled)
        let loop = client.loop
        await client.reportEvents { event in sink.yield((event, loop.inLoop)) }

        try await client.connect()
        let connected = try await handler.next(within: 10, "the connected event")
        #expect(connected.event?.isConnected(sessionPresent: false) == true)
        #expect(connected.onLoop)
        await client.abort()
        let lost = try await handler.next(within: 10, "the disconnected event")
        #expect(lost.event == .disconnected(.aborted))
        #expect(lost.onLoop)
        #expect(await client.state == .disconnected)

        await client.reportEvents(to: nil)
        try await client.connect()
        let first = try await stream.next(within: 10, "the event after the handler was removed")
        #expect(first.isConnected(sessionPresent: false), "the stream must not have received the handled events")
        sink.yield((nil, false))
        #expect(try await handler.next(within: 10, "the barrier").event == nil, "the removed handler got an event")
        await client.close()
    }

    @Test("reportEvents: the loss of the broker reaches the handler as disconnected")
    func brokerLossReachesHandler() async throws {
        let broker = try await TestBroker.start()
        let client = makeClient(broker)
        let (handled, sink) = AsyncStream.makeStream(of: MosquittoClient.Event.self)
        let handler = Collector(handled)
        await client.reportEvents { sink.yield($0) }
        try await client.connect()
        #expect(try await handler.next(within: 10, "the connected event").isConnected(sessionPresent: false))
        await broker.stop()
        let event = try await handler.next(within: 15, "the disconnected event after the broker stopped")
        guard case .disconnected(let reason) = event else {
            Issue.record("expected a disconnected event, got \(event)")
            await client.close()
            return
        }
        #expect(reason != .aborted && reason != .normal, "the broker ended it, not us: \(reason)")
        #expect(await client.state == .disconnected)
        await client.close()
    }

    // MARK: startPublish with a completion

    @Test("startPublish with a completion: each publish completes once, with success, in the order started", arguments: QoS.allCases)
    func completionsInOrder(qos: QoS) async throws {
        // A QoS 2 subscriber with a backlog needs the receive maximum's overrun tolerated, one
        // of libmosquitto's internals (ReceiveMaximumTests); without it mosquitto's overrun
        // (upstream #2301) ends its session.
        if qos == .exactlyOnce && !MosquittoLibrary.internals.contains(.receiveMaximumOverrun) { return }
        let broker = try await TestBroker.start()
        let subscriber = makeClient(broker)
        let inbox = try await connected(subscriber)
        try await subscriber.subscribe("seq/#", qos: qos)
        let publisher = makeClient(broker)
        try await publisher.connect()

        let count = 300
        let (outcomes, sink) = AsyncStream.makeStream(of: Outcome.self)
        let completions = Collector(outcomes)
        let (handedOver, handedOverSink) = AsyncStream.makeStream(of: [String].self)
        let failures = Collector(handedOver)
        let loop = publisher.loop
        // The way an event-driven caller uses it: from the loop, without suspending.
        publisher.perform { client in
            var errors: [String] = []
            for index in 0..<count {
                do {
                    try client.startPublish(topic: "seq/x", payload: Array("\(index)".utf8), qos: qos) { result in
                        sink.yield(("\(index)", result, loop.inLoop))
                    }
                } catch {
                    errors.append("\(index): \(error)")
                }
            }
            handedOverSink.yield(errors)
        }
        #expect(try await failures.next(within: 10, "the perform body") == [], "startPublish threw")
        for index in 0..<count {
            let outcome = try await completions.next(within: 10, "completion \(index)")
            #expect(outcome.tag == "\(index)", "completions out of order")
            #expect(Self.isSuccess(outcome.result), "publish \(index) failed: \(outcome.result)")
            #expect(outcome.onLoop, "completions run on the loop thread")
        }
        for index in 0..<count {
            #expect(try await inbox.next(within: 10, "message \(index)").payloadString == "\(index)")
        }
        // Acknowledged after every earlier publish: a completion called twice would have come by now.
        try await publisher.publish(topic: "seq/end", string: "end", qos: .atLeastOnce)
        sink.yield(("barrier", .success(()), false))
        #expect(try await completions.next(within: 10, "the barrier").tag == "barrier", "a completion was called more than once")
        #expect(await publisher.inflightPublishes == 0)
        await publisher.close()
        await subscriber.close()
    }

    @Test("startPublish with a completion on a client that is not connected throws notConnected and never calls the completion")
    func notConnectedNeverCompletes() async throws {
        let broker = try await TestBroker.start()
        let watcher = makeClient(broker)
        let watched = try await connected(watcher)
        try await watcher.subscribe("nc/#", qos: .atLeastOnce)

        let client = makeClient(broker) {
            $0.cleanStart = false
            $0.sessionExpiryInterval = 600
        }
        let (outcomes, sink) = AsyncStream.makeStream(of: Outcome.self)
        let completions = Collector(outcomes)
        let start: @Sendable (String) async throws -> Void = { tag in
            try await client.startPublish(topic: "nc/\(tag)", payload: Array(tag.utf8), qos: .atLeastOnce, completion: { result in
                sink.yield((tag, result, true))
            })
        }
        await #expect(throws: MosquittoError.notConnected) { try await start("never-connected") }
        try await client.connect()
        try await client.disconnect()
        await #expect(throws: MosquittoError.notConnected) { try await start("disconnected") }

        try await client.connect()
        try await start("connected")
        let outcome = try await completions.next(within: 10, "the completion of the connected publish")
        #expect(outcome.tag == "connected", "a refused publish called its completion")
        #expect(Self.isSuccess(outcome.result))
        let arrived = try await watched.next(within: 10, "the connected publish at the watcher")
        #expect(arrived.topic == "nc/connected", "a refused publish reached the broker")

        await client.close()
        await #expect(throws: MosquittoError.notConnected) { try await start("closed") }
        sink.yield(("barrier", .success(()), false))
        #expect(try await completions.next(within: 10, "the barrier").tag == "barrier", "a refused publish called its completion")
        await watcher.close()
    }

    @Test("startPublish with a completion: publishes still in flight when the client closes complete with a failure")
    func inFlightFailOnClose() async throws {
        let broker = try await TestBroker.start()
        let client = makeClient(broker)
        try await client.connect()
        // Freeze the broker: the connection stays open but nothing is acknowledged.
        #expect(kill(broker.pid, SIGSTOP) == 0)
        defer { kill(broker.pid, SIGCONT) }

        let count = 5
        let (outcomes, sink) = AsyncStream.makeStream(of: Outcome.self)
        let completions = Collector(outcomes)
        let loop = client.loop
        for index in 0..<count {
            try await client.startPublish(topic: "close/x", payload: [UInt8(index)], qos: .atLeastOnce, completion: { result in
                sink.yield(("\(index)", result, loop.inLoop))
            })
        }
        #expect(await client.inflightPublishes == count)
        #expect(await completions.pending.isEmpty, "a publish completed although the broker is frozen")

        await client.close()
        // (Failures at close come in no particular order: only the set is checked.)
        var failed: [String] = []
        for _ in 0..<count {
            let outcome = try await completions.next(within: 10, "the completion of an in-flight publish")
            switch outcome.result {
            case .success: Issue.record("publish \(outcome.tag) succeeded although the broker never acknowledged it")
            case .failure(let error): #expect(error == .closed, "publish \(outcome.tag): \(error)")
            }
            #expect(outcome.onLoop, "completions run on the loop thread")
            failed.append(outcome.tag)
        }
        #expect(failed.sorted() == (0..<count).map { "\($0)" }, "each in-flight publish completes exactly once")
        #expect(await client.inflightPublishes == 0)
        sink.yield(("barrier", .success(()), false))
        #expect(try await completions.next(within: 10, "the barrier").tag == "barrier", "a completion was called more than once")
    }
}
