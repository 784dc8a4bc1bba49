import ArgumentParser
import IMGateway

/// `imbench mqtt`: our `Mosquitto` wrapper against raw libmosquitto, on the chat workload of
/// `imbench chat`'s direct path, through the same broker in the same run.
///
/// Each round runs every API in turn (raw first), a phase of `--seconds` each, with its own
/// client IDs and topics. Per API: throughput, its ratio to raw (median of the rounds'
/// ratios), latency, loss and duplicates, and the CPU seconds per 1,000 messages of imbench
/// (where the clients run) and of the broker.
struct MQTTCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mqtt",
        abstract: "The Mosquitto wrapper's APIs against raw libmosquitto, through the same broker.",
        discussion: """
            APIs: raw (libmosquitto called directly on a thread of its own: poll and the \
            external-loop calls, publishing from the callbacks), publish (window tasks awaiting \
            publish, receiving through messages), start-publish (startPublish handed over from one \
            task, completions awaited in order, receiving through messages), callbacks \
            (startPublish with a completion callback and deliverMessages, event driven on the loop \
            thread). The publish and start-publish tasks prefer the clients' loop as their task \
            executor, as MosquittoClient's documentation recommends.
            """)

    @Option(help: "Messages in flight per publisher (published and not yet both acknowledged and received), at most.")
    var window = 64

    @Option(help: "Rounds: every API runs once per round, raw first.")
    var rounds = 3

    @Option(help: "APIs to measure besides raw, comma-separated: publish, start-publish, callbacks.")
    var apis = "publish,start-publish,callbacks"

    @OptionGroup var workload: ChatWorkloadOptions

    @OptionGroup var environment: EnvironmentOptions

    private var wrapperAPIs: [WrapperChatRun.API] {
        get throws {
            try apis.split(separator: ",").map { name in
                guard let api = WrapperChatRun.API(rawValue: String(name)) else {
                    throw ValidationError("--apis: unknown API \"\(name)\" (publish, start-publish, callbacks)")
                }
                return api
            }
        }
    }

    func validate() throws {
        guard window >= 1 else { throw ValidationError("--window must be at least 1") }
        guard rounds >= 1 else { throw ValidationError("--rounds must be at least 1") }
        _ = try wrapperAPIs
    }

    func run() async throws {
        DescriptorLimit.raiseToHardLimit()
        let settings = workload.settings(window: window)
        let apis = try wrapperAPIs
        let runID = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let env = try await BenchEnvironment.start(environment, gateway: false)
        let receiveMaximum = GatewayConfiguration.defaults.limits.maxUnackedDeliveries
        var raw: [ChatPhaseResult] = []
        var wrapped: [WrapperChatRun.API: [ChatPhaseResult]] = [:]
        do {
            for round in 1...rounds {
                let suffix = rounds == 1 ? "" : " round \(round)/\(rounds)"
                raw.append(
                    try await RawDirectChatRun.run(
                        settings, broker: env.broker, brokerPID: env.brokerPID, runID: "\(runID)-\(round)-raw",
                        receiveMaximum: receiveMaximum, title: "raw" + suffix))
                for api in apis {
                    wrapped[api, default: []].append(
                        try await WrapperChatRun.run(
                            settings, api: api, broker: env.broker, brokerPID: env.brokerPID,
                            runID: "\(runID)-\(round)-\(api.rawValue)", receiveMaximum: receiveMaximum,
                            title: api.rawValue + suffix))
                }
                let line = apis.compactMap { api in
                    wrapped[api]?.last.map { "\(api.rawValue) \(Int($0.messagesPerSecond.rounded()))" }
                }
                Log.info("round \(round)/\(rounds): raw \(Int(raw.last!.messagesPerSecond.rounded())) msg/s, " + line.joined(separator: ", "))
            }
        } catch {
            let failure = env.failure(error)
            await env.shutdown()
            throw failure
        }
        await env.shutdown()
        output(settings, apis: apis, raw: raw, wrapped: wrapped)
    }

    private func output(
        _ settings: ChatSettings, apis: [WrapperChatRun.API], raw rawRounds: [ChatPhaseResult],
        wrapped: [WrapperChatRun.API: [ChatPhaseResult]]
    ) {
        var json = JSONLine()
        json.add("benchmark", "mqtt")
        json.add(settings)
        json.add("rounds", rounds)
        func add(_ name: String, _ rounds: [ChatPhaseResult], ratios: [Double]?) {
            guard let phase = ChatPhaseResult.combining(rounds) else { return }
            var line = JSONLine()
            line.add("msgs_per_s", phase.messagesPerSecond, decimals: 0)
            line.add("round_msgs_per_s", .array(rounds.map { .double($0.messagesPerSecond, decimals: 0) }))
            if let ratios {
                line.add("ratio_to_raw", ChatStatistics.median(ratios), decimals: 3)
                line.add("ratios", .array(ratios.map { .double($0, decimals: 3) }))
            }
            line.add("p50_ms", phase.report.p50)
            line.add("p99_ms", phase.report.p99)
            line.add("max_ms", phase.report.max)
            line.add("sent", phase.report.totals.sent)
            line.add("received", phase.report.totals.received)
            line.add("lost", phase.report.lost)
            line.add("duplicates", phase.report.totals.duplicates)
            line.add("refused", phase.report.totals.refused)
            for label in ["bench", "broker", "other"] {
                if let cpu = phase.cpu[label] { line.add(label + "_cpu_percent", cpu, decimals: 0) }
            }
            for label in ["bench", "broker"] {
                if let seconds = phase.cpuSecondsPerThousand(label) { line.add(label + "_cpu_s_per_1000", seconds, decimals: 4) }
            }
            json.add(name, .object(line))
        }
        add("raw", rawRounds, ratios: nil)
        for api in apis {
            let rounds = wrapped[api] ?? []
            let ratios = zip(rounds, rawRounds).compactMap { wrapper, raw in
                raw.messagesPerSecond > 0 ? wrapper.messagesPerSecond / raw.messagesPerSecond : nil
            }
            add(api.rawValue, rounds, ratios: ratios)
        }
        json.print()
    }
}
