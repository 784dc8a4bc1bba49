#if canImport(Glibc)
import Glibc
#endif

/// The direct path of `imbench chat`: N publishers publish to N subscribers through the same
/// broker (topic `bench/direct/RUN/i`) with raw libmosquitto (``RawMQTTPair``), no wrapper of
/// ours in between: the limit the gateway is held against.
enum RawDirectChatRun {
    /// Connects the pairs, runs the workload, closes them.
    /// - Parameters:
    ///   - runID: Makes the topics and client IDs unique (one per round).
    ///   - receiveMaximum: The subscribers' MQTT receive maximum: the number of unacknowledged
    ///     messages the gateway lets a device have (limits.max_unacked_deliveries).
    ///   - title: The phase in log lines, e.g. "direct round 2/4".
    static func run(
        _ settings: ChatSettings, broker: BrokerAddress, brokerPID: pid_t?, runID: String, receiveMaximum: Int,
        title: String = "direct"
    ) async throws -> ChatPhaseResult {
        let ledger = ChatLedger(pairs: settings.pairs)
        Log.info("\(title): connecting \(settings.pairs) raw libmosquitto publisher(s) and subscriber(s) to \(broker)")
        let clients = try RawMQTTClients(
            pairs: settings.pairs, clientPrefix: "imbench-\(runID)", topicPrefix: "bench/direct/\(runID)", ledger: ledger,
            settings: settings)
        do {
            try await clients.connect(to: broker, receiveMaximum: receiveMaximum)
        } catch {
            await clients.close()
            throw error
        }
        var watch = [ChatPhase.Watched(label: "bench", pid: ProcessSample.ownPID())]
        if let brokerPID { watch.append(ChatPhase.Watched(label: "broker", pid: brokerPID)) }
        let result: ChatPhaseResult
        do {
            result = try await ChatPhase.measure(
                "direct", title: title, settings: settings, ledger: ledger, watch: watch,
                start: { clients.start() }, stop: { clients.stop() })
        } catch {
            await clients.close()
            throw error
        }
        await clients.close()
        return result
    }
}
