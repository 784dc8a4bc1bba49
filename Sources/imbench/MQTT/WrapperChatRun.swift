import Atomics
import Mosquitto
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The chat workload of the raw direct path (``RawDirectChatRun``), through our
/// `MosquittoClient` instead: N publishers to N subscribers on `bench/wrapper/RUN/i`, all on
/// one `MosquittoEventLoop` of this process, with the same window, QoS, payload and receive
/// maximum. ``API`` picks how the wrapper is used.
enum WrapperChatRun {
    /// How the publishers publish and the subscribers receive.
    enum API: String, CaseIterable, Sendable {
        /// `window` tasks per publisher, each awaiting `publish(...)`; received through
        /// `messages`. The tasks prefer the client's loop as their executor, as the
        /// client's documentation recommends for code that awaits it in a loop.
        case publish
        /// One task per publisher handing publishes over with `startPublish(...)` (no
        /// waiting), another awaiting their `completion(of:)` in order; received through
        /// `messages`. The tasks prefer the loop as their executor.
        case startPublish = "start-publish"
        /// Event driven on the loop thread: `startPublish(..., completion:)` and
        /// `deliverMessages(to:)`, new publishes started from the callbacks (what the gateway
        /// does).
        case callbacks
    }

    /// Connects the clients, runs the workload, closes them.
    static func run(
        _ settings: ChatSettings, api: API, broker: BrokerAddress, brokerPID: pid_t?, runID: String, receiveMaximum: Int,
        title: String
    ) async throws -> ChatPhaseResult {
        let ledger = ChatLedger(pairs: settings.pairs)
        let loop = MosquittoEventLoop(name: "imbench-wrapper")
        defer { loop.shutdown() }
        let qos: QoS = settings.qos == 2 ? .exactlyOnce : .atLeastOnce
        let topics = (0..<settings.pairs).map { "bench/wrapper/\(runID)/\($0)" }
        Log.info("\(title): connecting \(settings.pairs) MosquittoClient publisher(s) and subscriber(s) to \(broker)")

        var subscribers: [MosquittoClient] = []
        var publishers: [MosquittoClient] = []
        func closeAll() async {
            for client in publishers + subscribers { await client.close() }
        }
        let windows = (0..<settings.pairs).map { _ in PublishWindow() }
        do {
            for (pair, topic) in topics.enumerated() {
                var configuration = MosquittoClient.Configuration(
                    clientID: "imbench-\(runID)-sub-\(pair)", host: broker.host, port: broker.port)
                configuration.receiveMaximum = UInt16(clamping: receiveMaximum)
                configuration.username = broker.username
                configuration.password = broker.password
                let subscriber = MosquittoClient(configuration: configuration, loop: loop)
                subscribers.append(subscriber)
                let window = windows[pair]
                if api == .callbacks {
                    await subscriber.deliverMessages { message in
                        received(message, pair: pair, ledger: ledger, window: window)
                        return .now
                    }
                } else {
                    Task(executorPreference: loop.taskExecutor) { await consume(subscriber, pair: pair, ledger: ledger, window: window) }
                }
                _ = try await subscriber.connect()
                try await subscriber.subscribe(topic, qos: qos)
            }
            for pair in 0..<settings.pairs {
                var configuration = MosquittoClient.Configuration(
                    clientID: "imbench-\(runID)-pub-\(pair)", host: broker.host, port: broker.port)
                configuration.maxInflightPublishes = settings.window
                configuration.username = broker.username
                configuration.password = broker.password
                let publisher = MosquittoClient(configuration: configuration, loop: loop)
                publishers.append(publisher)
                _ = try await publisher.connect()
            }
        } catch {
            await closeAll()
            throw BenchError("\(title): cannot connect to the broker at \(broker): \(error)")
        }

        var watch = [ChatPhase.Watched(label: "bench", pid: ProcessSample.ownPID())]
        if let brokerPID { watch.append(ChatPhase.Watched(label: "broker", pid: brokerPID)) }
        // Set once at the end, read by every publisher before each message.
        let stop = ManagedAtomic(false)
        let workers = Mutex<Task<Void, Never>?>(nil)
        let frozenPublishers = publishers
        let result: ChatPhaseResult
        do {
            result = try await ChatPhase.measure(
                "direct", title: title, settings: settings, ledger: ledger, watch: watch,
                start: {
                    let startedAt = MonotonicClock.nanoseconds()
                    let task = Task(executorPreference: loop.taskExecutor) {
                        await withTaskGroup(of: Void.self) { group in
                            for (pair, publisher) in frozenPublishers.enumerated() {
                                let sender = Sender(
                                    pair: pair, topic: topics[pair], qos: qos, settings: settings, startedAt: startedAt,
                                    ledger: ledger, stop: stop, window: windows[pair])
                                switch api {
                                case .publish:
                                    // The pair's sequences 1, 2, 3... for its publishing tasks.
                                    let claim = ManagedAtomic(0)
                                    for _ in 0..<settings.window {
                                        group.addTask(executorPreference: loop.taskExecutor) { await sender.publishLoop(publisher, claim: claim) }
                                    }
                                case .startPublish:
                                    group.addTask(executorPreference: loop.taskExecutor) { await sender.startPublishLoop(publisher) }
                                case .callbacks:
                                    windows[pair].onFree { publisher.perform { sender.pump($0) } }
                                    publisher.perform { sender.pump($0) }
                                    if settings.rate != nil {
                                        // With a rate, time drives publishing too, not only freed slots.
                                        group.addTask {
                                            while !stop.load(ordering: .relaxed) {
                                                publisher.perform { sender.pump($0) }
                                                try? await Task.sleep(for: .microseconds(200))
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    workers.withLock { $0 = task }
                },
                stop: {
                    stop.store(true, ordering: .relaxed)
                    for window in windows { window.finish() }
                })
        } catch {
            stop.store(true, ordering: .relaxed)
            for window in windows { window.finish() }
            await closeAll()
            throw error
        }
        // Messages that never arrived keep their publishers waiting: release them.
        ledger.releaseWaiters()
        for window in windows { window.finish() }
        await workers.withLock { $0 }?.value
        await closeAll()
        return result
    }

    /// Records what a subscriber receives through `messages`, on its loop thread, until it
    /// is closed.
    private static func consume(_ client: isolated MosquittoClient, pair: Int, ledger: ChatLedger, window: PublishWindow) async {
        for await message in client.messages {
            received(message, pair: pair, ledger: ledger, window: window)
        }
    }

    /// Records a received message; frees its window slot if it was acknowledged already.
    private static func received(_ message: MosquittoMessage, pair: Int, ledger: ChatLedger, window: PublishWindow) {
        let now = MonotonicClock.nanoseconds()
        if let (sequence, sentAt) = BenchPayload.parse(message.payload),
           ledger.received(pair: pair, sequence: sequence, sentAt: sentAt, now: now) {
            window.slotFreed()
        }
    }

    /// One publisher's side of the workload, for each API.
    private struct Sender: Sendable {
        let pair: Int
        let topic: String
        let qos: QoS
        let settings: ChatSettings
        let startedAt: UInt64
        let ledger: ChatLedger
        let stop: ManagedAtomic<Bool>
        let window: PublishWindow

        /// The payload of the next message, or nil once stopped; waits for the rate.
        private func next(_ sequence: Int) async -> [UInt8]? {
            if let rate = settings.ratePerPair {
                let due = startedAt + UInt64(Double(sequence - 1) / rate * 1e9)
                let now = MonotonicClock.nanoseconds()
                if due > now { try? await Task.sleep(for: .nanoseconds(Int64(due - now))) }
            }
            if stop.load(ordering: .relaxed) { return nil }
            return BenchPayload.make(sequence: sequence, sentAt: MonotonicClock.nanoseconds(), size: settings.size)
        }

        /// `.publish`: one of `window` loops: publish, await PUBACK, await receipt.
        func publishLoop(_ client: isolated MosquittoClient, claim: ManagedAtomic<Int>) async {
            while !stop.load(ordering: .relaxed) {
                let sequence = claim.wrappingIncrementThenLoad(ordering: .relaxed)
                guard let payload = await next(sequence) else { return }
                ledger.sent(pair: pair)
                do {
                    try await client.publish(topic: topic, payload: payload, qos: qos)
                    if !ledger.acked(pair: pair, sequence: sequence) {
                        await ledger.awaitReceipt(pair: pair, sequence: sequence)
                    }
                } catch {
                    ledger.refused(pair: pair, reason: "publish failed: \(error)")
                    return
                }
            }
        }

        /// `.startPublish`: hands publishes over while the window has room; a child task
        /// awaits their completions in order.
        func startPublishLoop(_ client: MosquittoClient) async {
            let (tickets, ticketSink) = AsyncStream.makeStream(of: (MosquittoClient.PublishTicket, Int).self)
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await (ticket, sequence) in tickets {
                        do {
                            try await client.completion(of: ticket)
                            if ledger.acked(pair: pair, sequence: sequence) { window.slotFreed() }
                        } catch {
                            ledger.refused(pair: pair, reason: "publish failed: \(error)")
                            window.slotFreed()
                        }
                    }
                }
                var sequence = 0
                var slots = settings.window
                while !stop.load(ordering: .relaxed) {
                    if slots == 0 {
                        guard await window.waitForFree() else { break }
                        slots += 1
                        continue
                    }
                    sequence += 1
                    guard let payload = await next(sequence) else { break }
                    ledger.sent(pair: pair)
                    do {
                        let ticket = try await client.startPublish(topic: topic, payload: payload, qos: qos)
                        ticketSink.yield((ticket, sequence))
                        slots -= 1
                    } catch {
                        ledger.refused(pair: pair, reason: "publish failed: \(error)")
                        break
                    }
                }
                ticketSink.finish()
            }
        }

        /// `.callbacks`: starts what the window allows, on the loop thread.
        func pump(_ client: isolated MosquittoClient) {
            while !stop.load(ordering: .relaxed), let sequence = window.claim(limit: settings.window) {
                if let rate = settings.ratePerPair,
                   MonotonicClock.nanoseconds() < startedAt + UInt64(Double(sequence - 1) / rate * 1e9) {
                    window.unclaim()
                    return
                }
                let payload = BenchPayload.make(sequence: sequence, sentAt: MonotonicClock.nanoseconds(), size: settings.size)
                ledger.sent(pair: pair)
                do {
                    try client.startPublish(topic: topic, payload: payload, qos: qos) { [ledger, pair, window] outcome in
                        switch outcome {
                        case .success:
                            if ledger.acked(pair: pair, sequence: sequence) { window.slotFreed() }
                        case .failure(let error):
                            ledger.refused(pair: pair, reason: "publish failed: \(error)")
                            window.slotFreed()
                        }
                    }
                } catch {
                    ledger.refused(pair: pair, reason: "publish failed: \(error)")
                    return
                }
            }
        }
    }
}

