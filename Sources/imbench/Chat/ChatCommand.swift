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
struct ChatCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat",
        abstract: "Chat throughput and latency: through the gateway, then directly through the broker.")

    /// Which paths to run.
    enum Paths: String, ExpressibleByArgument, CaseIterable {
        case both, gateway, direct
    }

    @Option(help: "Seconds each path sends.")
    var seconds: Double

    @Option(help: "Sender → receiver pairs.")
    var pairs = 1

    @Option(help: "Total messages per second over all pairs (default: unlimited, closed loop with the window).")
    var rate: Double?

    @Option(help: "Messages in flight per sender (sent and not yet both ACKed and received), at most.")
    var window = 100

    @Option(help: "QoS of the chat messages: 1 or 2.")
    var qos = 1

    @Option(help: "Message content bytes.")
    var size = 64

    @Option(help: "Seconds to wait after sending stops for messages in flight.")
    var drain: Double = 5

    @Option(help: "Run both paths, or only one: both, gateway, direct.")
    var paths: Paths = .both

    @OptionGroup var environment: EnvironmentOptions

    func validate() throws {
        guard seconds > 0 else { throw ValidationError("--seconds must be positive") }
        guard pairs >= 1 else { throw ValidationError("--pairs must be at least 1") }
        guard window >= 1 else { throw ValidationError("--window must be at least 1") }
        guard qos == 1 || qos == 2 else { throw ValidationError("--qos must be 1 or 2") }
        guard size >= 1, size <= 65536 else { throw ValidationError("--size must be 1 to 65536") }
        if let rate, rate <= 0 { throw ValidationError("--rate must be positive") }
    }

    func run() async throws {
        DescriptorLimit.raiseToHardLimit()
        let settings = ChatSettings(
            seconds: seconds, pairs: pairs, rate: rate, window: window, qos: qos, size: size, drainSeconds: drain)
        let runID = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let env = try await BenchEnvironment.start(environment, gateway: paths != .direct)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var gateway: ChatPhaseResult?
        var direct: ChatPhaseResult?
        do {
            if paths != .direct {
                gateway = try await GatewayChatRun.run(settings, environment: env, loop: group.next(), runID: runID)
            }
            if paths != .gateway {
                direct = try await DirectChatRun.run(
                    settings, broker: env.broker, brokerPID: env.brokerPID, runID: runID,
                    receiveMaximum: GatewayConfiguration.defaults.limits.maxUnackedDeliveries)
            }
        } catch {
            let diagnostics = env.diagnostics
            await env.shutdown()
            try? await group.shutdownGracefully()
            throw BenchError("\(error)" + (diagnostics.isEmpty ? "" : " (\(diagnostics))"))
        }
        await env.shutdown()
        try? await group.shutdownGracefully()
        output(settings, gateway: gateway, direct: direct)
    }

    private func output(_ settings: ChatSettings, gateway: ChatPhaseResult?, direct: ChatPhaseResult?) {
        var json = JSONLine()
        json.add("benchmark", "chat")
        json.add("seconds", settings.seconds, decimals: 1)
        json.add("pairs", settings.pairs)
        json.add("rate", settings.rate, decimals: 0)
        json.add("window", settings.window)
        json.add("qos", settings.qos)
        json.add("size", settings.size)
        json.add("gateway_msgs_per_s", gateway?.messagesPerSecond, decimals: 0)
        json.add("direct_msgs_per_s", direct?.messagesPerSecond, decimals: 0)
        if let gateway, let direct, direct.messagesPerSecond > 0 {
            json.add("ratio", gateway.messagesPerSecond / direct.messagesPerSecond, decimals: 3)
        } else {
            json.add("ratio", .null)
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
            json.add(prefix + "unacked", phase.report.unacknowledged)
            json.add(prefix + "received", phase.report.totals.received)
            json.add(prefix + "load_avg", phase.loadAverage, decimals: 2)
            for label in ["gateway", "broker", "bench", "other", "softirq"] {
                if let cpu = phase.cpu[label] { json.add(prefix + label + "_cpu_percent", cpu, decimals: 0) }
            }
        }
        if let threads = gateway?.gatewayThreads, !threads.isEmpty {
            var line = JSONLine()
            for thread in threads.prefix(8) { line.add(thread.name, thread.percent, decimals: 0) }
            json.add("gateway_threads_cpu_percent", .object(line))
        }
        json.print()
    }
}
