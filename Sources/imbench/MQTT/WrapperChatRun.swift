import Mosquitto
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The direct path: N MQTT v5 publishers publish to N subscribers through the same broker
/// (topic `bench/direct/RUN/i`), all on one MosquittoEventLoop of this process. Each
/// publisher keeps up to `window` messages in flight (at most `window` unacknowledged
/// publishes, `maxInflightPublishes`): `window` tasks per publisher, each with one message
/// in flight (published, PUBACKed, received), running on the client's loop thread.
enum DirectChatRun {
    /// Connects the clients, runs the workload, closes them.
    /// - Parameters:
    ///   - runID: Makes the topics and client IDs unique (one per round: a round must not
    ///     see another's messages).
    ///   - receiveMaximum: The subscribers' MQTT receive maximum: the same number of
    ///     unacknowledged messages the gateway lets a device have (limits.max_unacked_deliveries).
    ///   - title: The phase in log lines (default "direct"), e.g. "direct round 2/4".
    static func run(
        _ settings: ChatSettings, broker: HostPort, brokerPID: pid_t?, runID: String, receiveMaximum: Int,
        title: String = "direct"
    ) async throws -> ChatPhaseResult {
        let ledger = ChatLedger(pairs: settings.pairs)
        let loop = MosquittoEventLoop(name: "imbench-direct")
        defer { loop.shutdown() }
        let qos: QoS = settings.qos == 2 ? .exactlyOnce : .atLeastOnce
        let topics = (0..<settings.pairs).map { "bench/direct/\(runID)/\($0)" }
        Log.info("\(title): connecting \(settings.pairs) subscriber(s) and \(settings.pairs) publisher(s) to \(broker)")

        var subscribers: [MosquittoClient] = []
        var publishers: [MosquittoClient] = []
        func closeAll() async {
            for client in publishers + subscribers { await client.close() }
        }
        do {
            for (pair, topic) in topics.enumerated() {
                var configuration = MosquittoClient.Configuration(
                    clientID: "imbench-\(runID)-sub-\(pair)", host: broker.host, port: broker.port)
                configuration.receiveMaximum = UInt16(clamping: receiveMaximum)
                let subscriber = MosquittoClient(configuration: configuration, loop: loop)
                subscribers.append(subscriber)
                _ = try await subscriber.connect()
                try await subscriber.subscribe(topic, qos: qos)
                Task { await consume(subscriber, pair: pair, ledger: ledger) }
            }
            for pair in 0..<settings.pairs {
                var configuration = MosquittoClient.Configuration(
                    clientID: "imbench-\(runID)-pub-\(pair)", host: broker.host, port: broker.port)
                configuration.maxInflightPublishes = settings.window
                let publisher = MosquittoClient(configuration: configuration, loop: loop)
                publishers.append(publisher)
                _ = try await publisher.connect()
            }
        } catch {
            await closeAll()
            throw BenchError("direct path: cannot connect to the broker at \(broker): \(error)")
        }

        var watch = [ChatPhase.Watched(label: "bench", pid: ProcessSample.ownPID())]
        if let brokerPID { watch.append(ChatPhase.Watched(label: "broker", pid: brokerPID)) }
        let stop = StopSignal()
        let workers = Mutex<Task<Void, Never>?>(nil)
        let frozenPublishers = publishers
        let result: ChatPhaseResult
        do {
            result = try await ChatPhase.measure(
                "direct", title: title, settings: settings, ledger: ledger, watch: watch,
                start: {
                    let startedAt = MonotonicClock.nanoseconds()
                    let task = Task {
                        await withTaskGroup(of: Void.self) { group in
                            for (pair, publisher) in frozenPublishers.enumerated() {
                                let claim = SequenceClaim()
                                for _ in 0..<settings.window {
                                    group.addTask {
                                        await publishLoop(
                                            publisher, pair: pair, topic: topics[pair], qos: qos, settings: settings,
                                            claim: claim, startedAt: startedAt, ledger: ledger, stop: stop)
                                    }
                                }
                            }
                        }
                    }
                    workers.withLock { $0 = task }
                },
                stop: { stop.set() })
        } catch {
            stop.set()
            await closeAll()
            throw error
        }
        // Messages that never arrived keep their publishers waiting: release them.
        ledger.releaseWaiters()
        await workers.withLock { $0 }?.value
        await closeAll()
        return result
    }

    /// One of a publisher's `window` loops: claim the next sequence, wait for its slot
    /// (with a rate), publish, wait for PUBACK/PUBCOMP and for the subscriber to receive
    /// it; until stopped.
    private static func publishLoop(
        _ client: isolated MosquittoClient, pair: Int, topic: String, qos: QoS, settings: ChatSettings,
        claim: SequenceClaim, startedAt: UInt64, ledger: ChatLedger, stop: StopSignal
    ) async {
        while !stop.isSet {
            let sequence = claim.next()
            if let rate = settings.ratePerPair {
                let due = startedAt + UInt64(Double(sequence - 1) / rate * 1e9)
                let now = MonotonicClock.nanoseconds()
                if due > now { try? await Task.sleep(for: .nanoseconds(Int64(due - now))) }
                if stop.isSet { return }
            }
            let payload = BenchPayload.make(sequence: sequence, sentAt: MonotonicClock.nanoseconds(), size: settings.size)
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

    /// Records what a subscriber receives, on its loop thread, until it is closed.
    private static func consume(_ client: isolated MosquittoClient, pair: Int, ledger: ChatLedger) async {
        for await message in client.messages {
            let now = MonotonicClock.nanoseconds()
            if let (sequence, sentAt) = BenchPayload.parse(message.payload) {
                ledger.received(pair: pair, sequence: sequence, sentAt: sentAt, now: now)
            }
        }
    }
}
