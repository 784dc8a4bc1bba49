import ArgumentParser
import IMGateway
import NIOCore
import NIOPosix

/// `imbench chat`: chat throughput and latency through the gateway, then the same workload
/// straight through the broker, in one run.
///
/// Gateway path: `pairs` sender devices each chat to their own receiver device (TLV → imgw →
/// MQTT broker → imgw → TLV); the receivers ACK every DELIVERY. Direct path: `pairs`
/// MosquittoClient publishers publish to `pairs` subscribers on the same broker at the same
/// QoS. Each message carries its send time; receivers record latency, duplicates, and, after
/// a drain, loss (ACKed to the sender, never received). Prints a progress line per second
/// and a JSON line with both paths' figures and their ratio.
///
/// With `--rounds N` the paths alternate N times (gateway, direct, gateway, ...) on the same
/// broker and gateway processes, so that drifts of the machine's speed hit both paths alike;
/// the figures then cover all rounds, and the ratio is the median of the rounds' ratios.
struct ChatCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat",
        abstract: "Chat throughput and latency: through the gateway, then directly through the broker.",
        discussion: """
            With --rounds N > 1 the two paths run alternately N times each (gateway, direct, gateway, \
            direct, ...) on the same broker and gateway. Rates, counts and latency percentiles then \
            cover all rounds of a path together, CPU figures are averages over its rounds, and \
            "ratio" is the median of the per-round ratios (also printed: "ratios", \
            "ratio_of_totals", and the per-round rates).
            """)

    /// Which paths to run.
    enum Paths: String, ExpressibleByArgument, CaseIterable {
        case both, gateway, direct
    }

    @Option(help: "Messages in flight per sender (sent and not yet both ACKed and received), at most.")
    var window = 100

    @Option(help: "Run both paths, or only one: both, gateway, direct.")
    var paths: Paths = .both

    @Flag(help: """
        Each pair's two devices chat both ways at once (2 × --pairs flows, every device sending \
        and receiving: its chat publishes share its MQTT session with the acknowledgements of \
        what it receives). The direct path runs the same number of flows.
        """)
    var duplex = false

    @Flag(inversion: .prefixedNo, help: """
        Devices take RECEIPT_NOTICE frames, as LOGIN does by default (one per chat to its \
        sender, which ACKs it; the direct path has nothing like them). With \
        --no-receipt-notices they log in with RECEIPT_NOTICES 0 and the two paths do the same \
        work per message.
        """)
    var receiptNotices = true

    @Option(help: """
        Gateway path: this many more devices flood chat as fast as the gateway answers \
        (256 unanswered each), ignoring RATE_LIMITED, while the pairs run; their counts are \
        reported as flood_*. With --rate, the pairs' latency is what a flood leaves to others.
        """)
    var flooders = 0

    @Option(help: "CHAT frames each flooder keeps unanswered.")
    var floodWindow = 256

    @Option(help: "Times to run each path, alternating gateway and direct (a phase of --seconds each), on the same broker and gateway.")
    var rounds = 1

    @OptionGroup var workload: ChatWorkloadOptions

    @OptionGroup var environment: EnvironmentOptions

    func validate() throws {
        guard window >= 1 else { throw ValidationError("--window must be at least 1") }
        guard rounds >= 1 else { throw ValidationError("--rounds must be at least 1") }
        guard flooders >= 0, floodWindow >= 1 else { throw ValidationError("--flooders must be at least 0 and --flood-window at least 1") }
    }

    func run() async throws {
        DescriptorLimit.raiseToHardLimit()
        var settings = workload.settings(window: window)
        if duplex {
            settings.pairs *= 2
            settings.duplex = true
        }
        settings.receiptNotices = receiptNotices
        settings.flooders = flooders
        settings.floodWindow = floodWindow
        let runID = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let env = try await BenchEnvironment.start(environment, gateway: paths != .direct)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var gateway: [ChatPhaseResult] = []
        var direct: [ChatPhaseResult] = []
        do {
            for round in 1...rounds {
                // Each round has its own devices, topics and client IDs: a late copy from an
                // earlier round cannot count in this one.
                let roundID = rounds == 1 ? runID : "\(runID)-\(round)"
                let suffix = rounds == 1 ? "" : " round \(round)/\(rounds)"
                if paths != .direct {
                    gateway.append(
                        try await GatewayChatRun.run(
                            settings, environment: env, loop: group.next(), runID: roundID, title: "gateway" + suffix))
                }
                if paths != .gateway {
                    direct.append(
                        try await RawDirectChatRun.run(
                            settings, broker: env.broker, brokerPID: env.brokerPID, runID: roundID,
                            receiveMaximum: GatewayConfiguration.defaults.limits.maxUnackedDeliveries,
                            title: "direct" + suffix))
                }
                if rounds > 1 { Log.info(Self.roundSummary(round: round, of: rounds, gateway: gateway.last, direct: direct.last)) }
            }
        } catch {
            let failure = env.failure(error)
            await env.shutdown()
            try? await group.shutdownGracefully()
            throw failure
        }
        await env.shutdown()
        try? await group.shutdownGracefully()
        output(settings, gateway: gateway, direct: direct)
    }

    /// The stderr line after a round: each path's rate and their ratio.
    private static func roundSummary(round: Int, of rounds: Int, gateway: ChatPhaseResult?, direct: ChatPhaseResult?) -> String {
        var parts: [String] = []
        if let gateway { parts.append("gateway \(Int(gateway.messagesPerSecond.rounded())) msg/s") }
        if let direct { parts.append("direct \(Int(direct.messagesPerSecond.rounded())) msg/s") }
        if let ratio = ratio(gateway, direct) { parts.append(String(format: "ratio %.3f", ratio)) }
        return "round \(round)/\(rounds): " + parts.joined(separator: ", ")
    }

    /// Gateway rate / direct rate; nil without both or with no direct messages.
    private static func ratio(_ gateway: ChatPhaseResult?, _ direct: ChatPhaseResult?) -> Double? {
        guard let gateway, let direct, direct.messagesPerSecond > 0 else { return nil }
        return gateway.messagesPerSecond / direct.messagesPerSecond
    }

    /// A JSON number rounded to `decimals` places; nil, NaN and infinity become null.
    private static func number(_ value: Double?, decimals: Int) -> JSONLine.Value {
        guard let value, value.isFinite else { return .null }
        return .double(value, decimals: decimals)
    }


    /// Prints the JSON line. With one round it has exactly the fields of a single run; with
    /// more, every figure covers all rounds of its path (see ``ChatPhaseResult/combining(_:)``),
    /// `ratio` is the median of the per-round ratios, and the per-round figures follow it.
    /// - Parameters:
    ///   - gatewayRounds: The gateway phases in order (empty when the path did not run).
    ///   - directRounds: The direct phases in order (empty when the path did not run).
    private func output(_ settings: ChatSettings, gateway gatewayRounds: [ChatPhaseResult], direct directRounds: [ChatPhaseResult]) {
        let gateway = ChatPhaseResult.combining(gatewayRounds)
        let direct = ChatPhaseResult.combining(directRounds)
        var json = JSONLine()
        json.add("benchmark", "chat")
        json.add(settings)
        if environment.gateway == nil { json.add("archive", environment.archive.hasPrefix("postgres") ? "postgres" : environment.archive) }
        if rounds > 1 { json.add("rounds", rounds) }
        json.add("gateway_msgs_per_s", gateway?.messagesPerSecond, decimals: 0)
        json.add("direct_msgs_per_s", direct?.messagesPerSecond, decimals: 0)
        if rounds == 1 {
            json.add("ratio", Self.ratio(gateway, direct), decimals: 3)
        } else {
            // Round i of one path against round i of the other: both ran within seconds of
            // each other, on much the same machine.
            let ratios = zip(gatewayRounds, directRounds).map { Self.ratio($0, $1) }
            json.add("ratio", ChatStatistics.median(ratios.compactMap { $0 }), decimals: 3)
            json.add("ratios", ratios.isEmpty ? .null : .array(ratios.map { Self.number($0, decimals: 3) }))
            json.add("ratio_of_totals", Self.ratio(gateway, direct), decimals: 3)
            for (key, phases) in [("gateway_round_msgs_per_s", gatewayRounds), ("direct_round_msgs_per_s", directRounds)] {
                json.add(key, phases.isEmpty ? .null : .array(phases.map { Self.number($0.messagesPerSecond, decimals: 0) }))
            }
        }
        if let flood = gateway?.flood, let gateway {
            json.add("flooders", flooders)
            json.add("flood_sent", flood.sent)
            json.add("flood_accepted", flood.accepted)
            json.add("flood_refused", flood.refused)
            json.add("flood_accepted_per_s", Double(flood.accepted) / max(gateway.elapsed, 0.001), decimals: 0)
        }
        json.add("p50_ms", gateway?.report.p50)
        json.add("p99_ms", gateway?.report.p99)
        json.add("p999_ms", gateway?.report.p999)
        json.add("max_ms", gateway?.report.max)
        json.add("direct_p50_ms", direct?.report.p50)
        json.add("direct_p99_ms", direct?.report.p99)
        json.add("direct_p999_ms", direct?.report.p999)
        json.add("direct_max_ms", direct?.report.max)
        json.add("lost", gateway?.report.lost)
        json.add("duplicates", gateway?.report.totals.duplicates)
        json.add("direct_lost", direct?.report.lost)
        json.add("direct_duplicates", direct?.report.totals.duplicates)
        for phase in [gateway, direct].compactMap({ $0 }) {
            let prefix = phase.name + "_"
            json.add(prefix + "sent", phase.report.totals.sent)
            json.add(prefix + "acked", phase.report.totals.acked)
            json.add(prefix + "refused", phase.report.totals.refused)
            if prefix == "gateway_" { json.add("gateway_receipt_notices", phase.report.totals.receiptNotices) }
            json.add(prefix + "unacked", phase.report.unacknowledged)
            json.add(prefix + "received", phase.report.totals.received)
            json.add(prefix + "load_avg", phase.loadAverage, decimals: 2)
            for label in ["gateway", "broker", "bench", "other", "softirq"] {
                if let cpu = phase.cpu[label] { json.add(prefix + label + "_cpu_percent", cpu, decimals: 0) }
            }
            for label in ["gateway", "broker", "bench"] {
                if let seconds = phase.cpuSecondsPerThousand(label) { json.add(prefix + label + "_cpu_s_per_1000", seconds, decimals: 4) }
            }
        }
        // The gateway's cost against the broker's for the same messages (same phase).
        if let gateway, let imgw = gateway.cpuSecondsPerThousand("gateway"), let broker = gateway.cpuSecondsPerThousand("broker"), broker > 0 {
            json.add("gateway_cpu_over_broker", imgw / broker, decimals: 2)
        }
        if let threads = gateway?.gatewayThreads, !threads.isEmpty {
            var line = JSONLine()
            for thread in threads.prefix(8) { line.add(thread.name, thread.percent, decimals: 0) }
            json.add("gateway_threads_cpu_percent", .object(line))
        }
        json.print()
    }
}
