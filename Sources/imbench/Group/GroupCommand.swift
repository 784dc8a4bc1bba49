import ArgumentParser
import IMGateway
import NIOCore
import NIOPosix

/// `imbench group`: group fan-out through the gateway, beside the same fan-out done by raw
/// libmosquitto on the same broker, in one run.
///
/// For each group size, one sender sends to a group whose members are partly online (each a
/// device logged in to imgw, or a raw subscriber) and partly offline (a session on the broker,
/// not connected). Three paths:
/// - `gateway`: CHAT with GROUP over TLV; imgw publishes one copy per member (how groups work,
///   docs/OPERATIONS.md);
/// - `per_member`: a raw libmosquitto publisher publishes each message once per member, to
///   the member's own topic (the same MQTT work as imgw's, without imgw);
/// - `fan_out`: it publishes once to a group topic every member subscribes to, and the broker
///   makes the copies.
///
/// Reports deliveries to online members per second, their latency, loss, CPU per 1,000
/// deliveries, and whether the offline members got every message once back.
struct GroupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "group",
        abstract: "Group fan-out: one sender, groups of N members (some offline), through imgw and through raw libmosquitto.",
        discussion: """
            Paths: gateway (CHAT with GROUP through imgw: one publish per member), per_member (a raw \
            libmosquitto publisher publishing each message to every member's topic), fan_out (one \
            publish to a topic every member subscribes to; the broker copies). A message holds a slot \
            of the sender's --window until it is acknowledged and every online member has it. After \
            each phase the offline members come back and their queued messages are counted. \
            "deliveries" are copies received by online members; CPU figures are per 1,000 of them.
            """)

    /// Which paths to run.
    enum Path: String, ExpressibleByArgument, CaseIterable {
        case gateway
        case perMember = "per_member"
        case fanOut = "fan_out"
    }

    @Option(help: ArgumentHelp("Group sizes, members including the sender, comma-separated.", valueName: "N,N,..."))
    var members = "10,100,1000"

    @Option(help: "Percent of the members (the sender excepted) that are offline during the phase.")
    var offlinePercent: Double = 10

    @Option(help: "Seconds the sender sends, per phase.")
    var seconds: Double = 5

    @Option(help: "Group messages the sender keeps in flight (until ACKed and received by every online member).")
    var window = 16

    @Option(help: "QoS of the messages: 1 or 2.")
    var qos = 1

    @Option(help: "Message content bytes.")
    var size = 64

    @Option(help: "Seconds to wait for what is in flight after sending stops, and for the offline members' queues.")
    var drain: Double = 30

    @Option(help: "Times to run each path per size, alternating (gateway, per_member, fan_out, gateway, ...).")
    var rounds = 1

    @Option(help: ArgumentHelp("Paths to run, comma-separated: gateway, per_member, fan_out.", valueName: "PATHS"))
    var paths = "gateway,per_member,fan_out"

    @Flag(inversion: .prefixedNo, help: """
        The sender takes RECEIPT_NOTICE frames (the protocol's default): one per member and \
        message. The members' delivered receipts are published either way.
        """)
    var receiptNotices = true

    @OptionGroup var environment: EnvironmentOptions

    func validate() throws {
        let sizes = try groupSizes()
        guard (0..<100).contains(offlinePercent) else { throw ValidationError("--offline-percent must be at least 0 and below 100") }
        for members in sizes where settings(members: members).online < 1 {
            throw ValidationError("a group of \(members) with \(offlinePercent)% offline has no online member")
        }
        guard seconds > 0, drain > 0 else { throw ValidationError("--seconds and --drain must be positive") }
        guard window >= 1, rounds >= 1 else { throw ValidationError("--window and --rounds must be at least 1") }
        guard qos == 1 || qos == 2 else { throw ValidationError("--qos must be 1 or 2") }
        guard size >= 1, size <= 65536 else { throw ValidationError("--size must be 1 to 65536") }
        _ = try selectedPaths()
        if environment.gateway != nil {
            throw ValidationError("imbench group starts its own imgw (it creates the groups through that imgw's server API): drop --gateway")
        }
    }

    /// The sizes of `--members`.
    private func groupSizes() throws -> [Int] {
        let sizes = members.split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !sizes.isEmpty, sizes.allSatisfy({ ($0 ?? 0) >= 2 && ($0 ?? 0) <= 100_000 }) else {
            throw ValidationError("--members takes group sizes from 2 to 100000, comma-separated, e.g. 10,100,1000")
        }
        return sizes.compactMap { $0 }
    }

    /// The paths of `--paths`, in the order they run.
    private func selectedPaths() throws -> [Path] {
        var selected: [Path] = []
        for name in paths.split(separator: ",") {
            guard let path = Path(rawValue: name.trimmingCharacters(in: .whitespaces)) else {
                throw ValidationError("--paths takes gateway, per_member and fan_out, comma-separated (not \(name))")
            }
            if !selected.contains(path) { selected.append(path) }
        }
        guard !selected.isEmpty else { throw ValidationError("--paths names no path") }
        return Path.allCases.filter(selected.contains)
    }

    /// The workload for a group of `members`.
    private func settings(members: Int) -> GroupSettings {
        let offline = Int((Double(members - 1) * offlinePercent / 100).rounded())
        return GroupSettings(
            members: members, offline: offline, seconds: seconds, window: window, qos: qos, size: size, drainSeconds: drain,
            receiptNotices: receiptNotices)
    }

    func run() async throws {
        DescriptorLimit.raiseToHardLimit()
        let sizes = try groupSizes()
        let paths = try selectedPaths()
        let runID = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let apiPort = HostPort.freeLoopbackPort()
        let apiKey = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let env = try await BenchEnvironment.start(
            environment, gateway: paths.contains(.gateway),
            gatewayLines: BenchAPI.configurationLines(port: apiPort, key: apiKey, maxMembers: max(sizes.max() ?? 2, 2)))
        let loopGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let api: BenchAPI
        do {
            api = try BenchAPI(port: apiPort, key: apiKey)
        } catch {
            await env.shutdown()
            throw error
        }
        var results: [(settings: GroupSettings, paths: [GroupPhaseResult])] = []
        do {
            for members in sizes {
                let settings = settings(members: members)
                var phases: [Path: [GroupPhaseResult]] = [:]
                for round in 1...rounds {
                    for path in paths {
                        let id = "\(runID)-\(members)-\(round)-\(path.rawValue)"
                        let title = "\(path.rawValue) \(members) members" + (rounds == 1 ? "" : " round \(round)/\(rounds)")
                        let result: GroupPhaseResult
                        switch path {
                        case .gateway:
                            result = try await GatewayGroupRun.run(settings, environment: env, api: api, loop: loopGroup.next(), runID: id, title: title)
                        case .perMember, .fanOut:
                            result = try await RawGroupRun.run(
                                settings, mode: path == .fanOut ? .fanOut : .perMember, broker: env.broker, brokerPID: env.brokerPID,
                                runID: id, receiveMaximum: GatewayConfiguration.defaults.limits.maxUnackedDeliveries, title: title)
                        }
                        phases[path, default: []].append(result)
                    }
                }
                let combined = paths.compactMap { phases[$0].flatMap(GroupPhaseResult.combining) }
                Log.info(Self.summary(settings, combined))
                results.append((settings, combined))
            }
        } catch {
            let failure = env.failure(error)
            await api.shutdown()
            await env.shutdown()
            try? await loopGroup.shutdownGracefully()
            throw failure
        }
        await api.shutdown()
        await env.shutdown()
        try? await loopGroup.shutdownGracefully()
        output(results)
    }

    /// The stderr line after a size: each path's deliveries per second and p99.
    private static func summary(_ settings: GroupSettings, _ results: [GroupPhaseResult]) -> String {
        "group of \(settings.members) (\(settings.offline) offline): "
            + results.map { result in
                "\(result.path) \(Int(result.phase.messagesPerSecond.rounded())) deliveries/s, p99 \(result.phase.report.p99) ms"
            }.joined(separator: "; ")
    }

    /// Prints the JSON line: the workload, then per group size each path's figures and the
    /// gateway's deliveries per second over each raw path's.
    private func output(_ results: [(settings: GroupSettings, paths: [GroupPhaseResult])]) {
        var json = JSONLine()
        json.add("benchmark", "group")
        json.add("seconds", seconds, decimals: 1)
        json.add("window", window)
        json.add("qos", qos)
        json.add("size", size)
        json.add("offline_percent", offlinePercent, decimals: 1)
        if !receiptNotices { json.add("receipt_notices", false) }
        if rounds > 1 { json.add("rounds", rounds) }
        var groups: [JSONLine.Value] = []
        for (settings, paths) in results {
            var group = JSONLine()
            group.add("members", settings.members)
            group.add("online", settings.online)
            group.add("offline", settings.offline)
            for result in paths { group.add(result.path, .object(Self.figures(result, online: settings.online))) }
            if let gateway = paths.first(where: { $0.path == "gateway" }) {
                for other in paths where other.path != "gateway" && other.phase.messagesPerSecond > 0 {
                    group.add("gateway_over_" + other.path, gateway.phase.messagesPerSecond / other.phase.messagesPerSecond, decimals: 3)
                }
            }
            groups.append(.object(group))
        }
        json.add("groups", .array(groups))
        json.print()
    }

    /// One path's figures.
    private static func figures(_ result: GroupPhaseResult, online: Int) -> JSONLine {
        let phase = result.phase
        let report = phase.report
        var line = JSONLine()
        line.add("deliveries_per_s", phase.messagesPerSecond, decimals: 0)
        line.add("messages_per_s", phase.messagesPerSecond / Double(max(online, 1)), decimals: 1)
        line.add("p50_ms", report.p50)
        line.add("p99_ms", report.p99)
        line.add("max_ms", report.max)
        line.add("sent", report.totals.sent)
        line.add("acked", report.totals.acked)
        line.add("refused", report.totals.refused)
        line.add("unacked", report.unacknowledged)
        line.add("delivered", report.totals.received)
        line.add("lost", report.lost)
        line.add("duplicates", report.totals.duplicates)
        if result.path == "gateway" { line.add("receipt_notices", report.totals.receiptNotices) }
        line.add("offline_expected", result.offline.expected)
        line.add("offline_received", result.offline.received)
        line.add("offline_duplicates", result.offline.duplicates)
        line.add("offline_out_of_order", result.offline.outOfOrder)
        line.add("catch_up_s", result.catchUpSeconds, decimals: 2)
        line.add("load_avg", phase.loadAverage, decimals: 2)
        for label in ["gateway", "broker", "bench", "other"] {
            if let cpu = phase.cpu[label] { line.add(label + "_cpu_percent", cpu, decimals: 0) }
        }
        for label in ["gateway", "broker", "bench"] {
            if let seconds = phase.cpuSecondsPerThousand(label) { line.add(label + "_cpu_s_per_1000", seconds, decimals: 4) }
        }
        if let first = report.firstError { line.add("first_error", first) }
        return line
    }
}
