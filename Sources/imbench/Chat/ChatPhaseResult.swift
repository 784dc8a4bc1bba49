/// The outcome of one chat phase (the gateway path or the direct path).
struct ChatPhaseResult: Sendable {
    /// "gateway" or "direct".
    var name: String
    /// Length of the sending window actually measured, seconds.
    var elapsed: Double
    /// Messages received (first copies) during the sending window, per second.
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
}
