#if canImport(Glibc)
import Glibc
#endif

/// The raw libmosquitto paths of `imbench group` (``RawGroupClients``): the same workload as
/// the gateway path, one publish per member or one fanned out by the broker.
enum RawGroupRun {
    /// - Parameter receiveMaximum: The members' MQTT receive maximum: the gateway's
    ///   limits.max_unacked_deliveries, as its sessions have.
    static func run(
        _ settings: GroupSettings, mode: RawGroupClients.Mode, broker: BrokerAddress, brokerPID: pid_t?, runID: String,
        receiveMaximum: Int, title: String
    ) async throws -> GroupPhaseResult {
        let ledger = GroupLedger(online: settings.online, offline: settings.offline)
        Log.info("\(title): connecting a raw libmosquitto publisher and \(settings.members - 1) subscriber(s) to \(broker)")
        let clients = try RawGroupClients(
            mode: mode, clientPrefix: "imbench-\(runID)", topicPrefix: "bench/group/\(runID)", ledger: ledger,
            window: settings.window, size: settings.size, qos: settings.qos)
        do {
            try await clients.connect(to: broker, receiveMaximum: receiveMaximum)
            if settings.offline > 0 { try await clients.takeOffline() }
            var watch = [ChatPhase.Watched(label: "bench", pid: ProcessSample.ownPID())]
            if let brokerPID { watch.append(ChatPhase.Watched(label: "broker", pid: brokerPID)) }
            let phase = try await ChatPhase.measure(
                mode.rawValue, title: title, seconds: settings.seconds, drainSeconds: settings.drainSeconds, unit: "deliveries/s",
                ledger: ledger, watch: watch, start: { clients.start() }, stop: { clients.stop() })
            var result = GroupPhaseResult(path: mode.rawValue, phase: phase, offline: GroupLedger.OfflineCounts(), catchUpSeconds: nil)
            if settings.offline > 0 {
                let back = MonotonicClock.nanoseconds()
                clients.bringOfflineBack()
                result.catchUpSeconds = try await GroupPhaseResult.awaitCatchUp(ledger, since: back, within: settings.drainSeconds)
                result.offline = ledger.offlineCounts()
                Log.info("\(title): \(result.offlineSummary)")
            }
            await clients.close()
            return result
        } catch {
            await clients.close()
            throw error
        }
    }
}
