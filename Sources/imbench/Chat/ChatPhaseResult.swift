/// The outcome of one chat phase (the gateway path or the direct path), or of several rounds
/// of one path taken together (``combining(_:)``).
struct ChatPhaseResult: Sendable {
    /// "gateway" or "direct".
    var name: String
    /// Length of the sending window actually measured, seconds (summed over rounds).
    var elapsed: Double
    /// Messages received (first copies) during the sending window.
    var receivedInWindow: Int
    /// Messages received (first copies) during the sending window, per second:
    /// `receivedInWindow / elapsed`.
    var messagesPerSecond: Double
    /// Counts, loss, duplicates and latency after the drain.
    var report: ChatLedger.Report
    /// CPU of the watched processes during the sending window, percent of one core, and of
    /// everything else on the machine ("other").
    var cpu: [String: Double]
    /// The gateway's threads, busiest first (gateway phase, when imbench started imgw).
    var gatewayThreads: [(name: String, percent: Double)]
    /// The machine's 1-minute load average when the phase started.
    var loadAverage: Double
    /// What the flooders sent, and the gateway took and refused (gateway phase with
    /// `--flooders`).
    var flood: FloodCounts.Totals?

    /// CPU seconds the process `label` ("gateway", "broker", "bench") used per 1,000 messages
    /// received in the sending window; nil when it was not sampled or nothing arrived.
    func cpuSecondsPerThousand(_ label: String) -> Double? {
        guard let percent = cpu[label], receivedInWindow > 0 else { return nil }
        return percent / 100 * elapsed / Double(receivedInWindow) * 1000
    }

    /// Several rounds of the same path as one result: the messages received in all sending
    /// windows over the sum of those windows, counts summed, latency over all rounds' samples,
    /// CPU (per process and per gateway thread) and load average averaged over the rounds.
    /// One result is returned unchanged; nil for none.
    static func combining(_ rounds: [ChatPhaseResult]) -> ChatPhaseResult? {
        guard let first = rounds.first, let report = ChatLedger.Report.combining(rounds.map(\.report)) else { return nil }
        if rounds.count == 1 { return first }
        let count = Double(rounds.count)
        let elapsed = rounds.reduce(0) { $0 + $1.elapsed }
        let received = rounds.reduce(0) { $0 + $1.receivedInWindow }
        // A label is missing from a round only when its process could not be sampled then:
        // average over the rounds that have it.
        var cpu: [String: Double] = [:]
        for label in Set(rounds.flatMap(\.cpu.keys)) {
            let values = rounds.compactMap { $0.cpu[label] }
            cpu[label] = values.reduce(0, +) / Double(values.count)
        }
        // A thread is missing from a round when it was (nearly) idle: it counts as 0 there.
        var threadSums: [String: Double] = [:]
        for round in rounds {
            for thread in round.gatewayThreads { threadSums[thread.name, default: 0] += thread.percent }
        }
        let threads = threadSums.map { (name: $0.key, percent: $0.value / count) }
            .sorted { $0.percent != $1.percent ? $0.percent > $1.percent : $0.name < $1.name }
        var flood: FloodCounts.Totals?
        for round in rounds {
            guard let counts = round.flood else { continue }
            var sum = flood ?? FloodCounts.Totals()
            sum.sent += counts.sent
            sum.accepted += counts.accepted
            sum.refused += counts.refused
            flood = sum
        }
        return ChatPhaseResult(
            name: first.name, elapsed: elapsed, receivedInWindow: received, messagesPerSecond: Double(received) / elapsed,
            report: report, cpu: cpu, gatewayThreads: threads,
            loadAverage: rounds.reduce(0) { $0 + $1.loadAverage } / count, flood: flood)
    }
}
