/// The outcome of one `imbench group` phase: the online members' deliveries (as a chat phase:
/// "received" counts deliveries), then what the offline members got once back.
struct GroupPhaseResult: Sendable {
    /// "gateway", "per_member" or "fan_out".
    var path: String
    var phase: ChatPhaseResult
    var offline: GroupLedger.OfflineCounts
    /// From the offline members' return until their last queued message arrived; nil when
    /// not everything arrived within the drain time.
    var catchUpSeconds: Double?

    /// Returns once every offline member received every message ACKed in the phase, or after
    /// `seconds`: the time it took, or nil.
    static func awaitCatchUp(_ ledger: GroupLedger, since start: UInt64, within seconds: Double) async throws -> Double? {
        while true {
            let counts = ledger.offlineCounts()
            if counts.received >= counts.expected { return MonotonicClock.seconds(since: start) }
            if MonotonicClock.seconds(since: start) >= seconds { return nil }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// The log line about the offline members.
    var offlineSummary: String {
        "offline members got \(offline.received) of \(offline.expected) queued deliveries"
            + (catchUpSeconds.map { String(format: " in %.2f s", $0) } ?? " (not all within the drain time)")
            + (offline.duplicates > 0 ? ", \(offline.duplicates) duplicates" : "")
            + (offline.outOfOrder > 0 ? ", \(offline.outOfOrder) out of order" : "")
    }
}

extension GroupPhaseResult {
    /// Several rounds of one path as one (``ChatPhaseResult/combining(_:)``; offline counts
    /// summed, the slowest catch-up, nil if any round's did not finish). Nil for none.
    static func combining(_ rounds: [GroupPhaseResult]) -> GroupPhaseResult? {
        guard let first = rounds.first, let phase = ChatPhaseResult.combining(rounds.map(\.phase)) else { return nil }
        var offline = GroupLedger.OfflineCounts()
        for round in rounds {
            offline.expected += round.offline.expected
            offline.received += round.offline.received
            offline.duplicates += round.offline.duplicates
            offline.outOfOrder += round.offline.outOfOrder
        }
        let catchUps = rounds.map(\.catchUpSeconds)
        let catchUp: Double? = catchUps.contains { $0 == nil } && offline.expected > 0 ? nil : catchUps.compactMap { $0 }.max()
        return GroupPhaseResult(path: first.path, phase: phase, offline: offline, catchUpSeconds: catchUp)
    }
}
