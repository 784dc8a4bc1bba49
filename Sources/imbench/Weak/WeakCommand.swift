import ArgumentParser
import FaultProxy
import Foundation
import Histogram
import IMClient
import IMGateway

/// `imbench weak`: chat on a bad network. Every device (IMClient, with its reconnect,
/// heartbeat and outbox) reaches the gateway through a ``FaultProxy`` that adds latency,
/// stalls and connection cuts; now and then the whole network goes away for every device (an
/// ``OutageSchedule``) and comes back, when the bench calls `networkAvailable()` (or `networkChanged()`) on every
/// client as an app does on the platform's connectivity callback. Senders post a steady
/// stream for `seconds`, then the faults stop and everything is drained. Reports what
/// arrived (once, in order), how long reconnects took, and how soon devices were back after
/// the network returned (an ``OutageReport``).
struct WeakCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "weak",
        abstract: "Chat through a fault-injecting proxy: delivered %, duplicates, order, reconnect times.")

    @Option(help: "Seconds of sending under faults.")
    var seconds: Double = 30

    @Option(help: "Sender/receiver pairs (each pair one conversation).")
    var pairs = 4

    @Option(help: "Messages per second per pair.")
    var rate: Double = 5

    @Option(help: "Latency per chunk and direction, milliseconds: MIN-MAX.")
    var latency = "200-800"

    @Option(help: "Stalls per minute per connection (both directions stop for 1-5 s).")
    var stallsPerMinute: Double = 2

    @Option(help: "Connection cuts (RST) per minute per connection.")
    var cutsPerMinute: Double = 2

    @Option(help: "Network outages per minute, for every device at once (0: none).")
    var outagesPerMinute: Double = 1

    @Option(help: "How long one outage lasts, seconds: MIN-MAX.")
    var outageDuration = "2-6"

    @Option(help: "What an outage does to open connections: hold (silence, then delivered intact) or blackhole (silence for good).")
    var outageMode = OutageMode.hold

    @Option(help: "Seconds to wait, after the faults stop, for every message to arrive.")
    var drain: Double = 120

    @Option(help: "Seed for the proxy's randomness and the outage schedule (reproducible fault sequence).")
    var seed: UInt64?

    @OptionGroup var environment: EnvironmentOptions

    func validate() throws {
        guard seconds > 0, pairs >= 1, rate > 0, drain > 0 else {
            throw ValidationError("--seconds, --pairs, --rate and --drain must be positive")
        }
        guard latencyRange != nil else { throw ValidationError("--latency wants MIN-MAX in milliseconds, e.g. 200-800") }
        guard outagesPerMinute.isFinite, outagesPerMinute >= 0 else {
            throw ValidationError("--outages-per-minute must be 0 or more")
        }
        guard let outageRange else {
            throw ValidationError("--outage-duration wants MIN-MAX in seconds, e.g. 2-6")
        }
        guard outagesPerMinute == 0 || 60 / outagesPerMinute > outageRange.upperBound else {
            throw ValidationError("--outages-per-minute \(outagesPerMinute) leaves \(60 / outagesPerMinute) s per outage, "
                + "not more than --outage-duration's \(outageRange.upperBound) s: the network would never come back")
        }
    }

    var latencyRange: ClosedRange<Duration>? {
        let parts = latency.split(separator: "-").compactMap { Int($0) }
        guard parts.count == 2, parts[0] >= 0, parts[0] <= parts[1] else { return nil }
        return .milliseconds(parts[0]) ... .milliseconds(parts[1])
    }

    /// `--outage-duration` in seconds; nil unless it is MIN-MAX with 0 < MIN <= MAX.
    var outageRange: ClosedRange<Double>? {
        let parts = outageDuration.split(separator: "-", omittingEmptySubsequences: false).map { Double($0) }
        guard parts.count == 2, let lower = parts[0], let upper = parts[1], lower.isFinite, upper.isFinite,
            lower > 0, lower <= upper
        else { return nil }
        return lower ... upper
    }

    /// The outages of this run: seeded from `--seed` when given.
    var outageSchedule: OutageSchedule {
        let range = outageRange ?? 2 ... 6
        guard let seed else {
            var generator = SystemRandomNumberGenerator()
            return OutageSchedule(seconds: seconds, perMinute: outagesPerMinute, duration: range, using: &generator)
        }
        // Apart from the proxy's draws, which mix the same seed per connection.
        var generator = SeededRandom(seed: seed ^ 0x6F75_7461_6765_7321)
        return OutageSchedule(seconds: seconds, perMinute: outagesPerMinute, duration: range, using: &generator)
    }

    func run() async throws {
        try await BenchEnvironment.measure(environment) { try await measure($0) }
    }

    private func measure(_ env: BenchEnvironment) async throws -> JSONLine {
        let profile = FaultProfile(
            latency: latencyRange, stallsPerMinute: stallsPerMinute, stallDuration: .seconds(1) ... .seconds(5),
            cutsPerMinute: cutsPerMinute)
        let proxy = try await FaultProxy.start(upstreamHost: env.gateway.host, upstreamPort: env.gateway.port, seed: seed)
        let runID = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let minter = TokenMinter(secret: env.secret)
        let ledger = WeakLedger(pairs: pairs)

        // Log in without faults (logging in is not what is measured), then turn them on.
        Log.info("weak: logging in \(pairs) pairs through the proxy on :\(proxy.port)")
        var senders: [IMClient] = []
        var receivers: [IMClient] = []
        for pair in 0..<pairs {
            let receiver = try await IMClient.connect(configuration(try await minter.mint(user: "weak-\(runID)-r\(pair)"), proxy))
            let sender = try await IMClient.connect(configuration(try await minter.mint(user: "weak-\(runID)-s\(pair)"), proxy))
            receivers.append(receiver)
            senders.append(sender)
        }
        var watchers: [Task<Void, Never>] = []
        for (index, client) in (senders + receivers).enumerated() {
            let isReceiver = index >= pairs
            let pair = index % pairs
            watchers.append(Task { await ledger.watch(client, device: index, pair: isReceiver ? pair : nil) })
        }
        // When the proxy accepts connections (to time the first ones after an outage).
        let acceptedBefore = proxy.statistics.connectionsAccepted
        await ledger.proxyAccepted(total: acceptedBefore, at: MonotonicClock.nanoseconds())
        let acceptWatcher = Task {
            var seen = acceptedBefore
            for await statistics in proxy.statisticsUpdates() where statistics.connectionsAccepted != seen {
                seen = statistics.connectionsAccepted
                await ledger.proxyAccepted(total: seen, at: MonotonicClock.nanoseconds())
            }
        }
        let schedule = outageSchedule
        proxy.setProfile(profile)
        let faultsStart = ContinuousClock.now
        Log.info("weak: sending \(rate) msg/s per pair for \(seconds) s under faults (latency \(latency) ms, "
            + "\(stallsPerMinute) stalls/min, \(cutsPerMinute) cuts/min per connection, "
            + "\(schedule.outages.count) network outage(s) of \(outageDuration) s, \(outageMode.rawValue))")
        let clients = senders + receivers
        let outages = Task {
            await Self.runOutages(schedule, mode: outageMode, from: faultsStart, proxy: proxy, clients: clients, ledger: ledger)
        }

        // One stream per pair, posted in order at the rate; each post finishes when ACKed.
        var sendTasks: [Task<Void, Never>] = []
        for pair in 0..<pairs {
            let sender = senders[pair]
            let to = "weak-\(runID)-r\(pair)"
            let interval = Duration.seconds(1 / rate)
            let total = Int(seconds * rate)
            sendTasks.append(Task {
                var acks: [Task<IMClient.SendReceipt, any Error>] = []
                let start = ContinuousClock.now
                for sequence in 0..<total {
                    try? await Task.sleep(until: start + interval * sequence, clock: .continuous)
                    let sent = MonotonicClock.nanoseconds()
                    do {
                        acks.append(try await sender.post(to: to, content: .text("\(sequence) \(sent)"), messageID: "p\(pair)-\(sequence)"))
                        await ledger.sent(pair: pair)
                    } catch {
                        await ledger.failed(pair: pair, error: "\(error)")
                    }
                }
                for ack in acks {
                    do {
                        _ = try await ack.value
                        await ledger.acked(pair: pair)
                    } catch {
                        await ledger.failed(pair: pair, error: "\(error)")
                    }
                }
            })
        }
        let progress = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                let snapshot = await ledger.snapshot
                let stats = proxy.statistics
                Log.info("weak: \((ContinuousClock.now - faultsStart).components.seconds)s sent \(snapshot.sent) acked \(snapshot.acked) "
                    + "received \(snapshot.received) reconnects \(snapshot.reconnects) cuts \(stats.cuts) stalls \(stats.stalls) "
                    + "outages \(snapshot.outages)/\(schedule.outages.count)\(snapshot.networkDown ? " (network down)" : "")")
            }
        }
        try? await Task.sleep(until: faultsStart + .seconds(seconds), clock: .continuous)
        await outages.value  // the last one ended before this by construction; waits for its networkAvailable()/networkChanged()
        proxy.setProfile(.none)
        Log.info("weak: faults off; draining (up to \(Int(drain)) s)")
        let drainEnd = ContinuousClock.now + .seconds(drain)
        for task in sendTasks {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await task.value }
                group.addTask { try? await Task.sleep(until: drainEnd, clock: .continuous) }
                await group.next()
                group.cancelAll()
            }
        }
        while await ledger.isMissingMessages, ContinuousClock.now < drainEnd {
            try? await Task.sleep(for: .milliseconds(100))
        }
        progress.cancel()
        let stats = proxy.statistics
        for client in senders + receivers { await client.logout() }
        for watcher in watchers { watcher.cancel() }
        acceptWatcher.cancel()
        await proxy.stop()

        let result = await ledger.snapshot
        let outageReport = await ledger.outageReport(connectionsSurvive: outageMode == .hold)
        for (index, outcome) in outageReport.outcomes.enumerated() {
            Log.info("weak: " + Self.describe(outcome, number: index + 1))
        }
        var json = JSONLine()
        json.add("bench", "weak")
        json.add("seconds", seconds, decimals: 1)
        json.add("pairs", pairs)
        json.add("rate_per_pair", rate, decimals: 1)
        json.add("latency_ms", latency)
        json.add("stalls_per_minute", stallsPerMinute, decimals: 1)
        json.add("cuts_per_minute", cutsPerMinute, decimals: 1)
        json.add("outages_per_minute", outagesPerMinute, decimals: 1)
        json.add("outage_duration_s", outageDuration)
        json.add("outage_mode", outageMode.rawValue)
        json.add("sent", result.sent)
        json.add("acked", result.acked)
        json.add("received", result.received)
        json.add("delivered_pct", result.sent == 0 ? nil : Double(result.received) * 100 / Double(result.sent), decimals: 2)
        json.add("duplicates", result.duplicates)
        json.add("order_violations", result.orderViolations)
        json.add("send_failures", result.failures)
        json.add("reconnects", result.reconnects)
        json.add("reconnect_p50_ms", result.reconnectMilliseconds(0.5), decimals: 0)
        json.add("reconnect_p90_ms", result.reconnectMilliseconds(0.9), decimals: 0)
        json.add("reconnect_max_ms", result.reconnectMilliseconds(1.0), decimals: 0)
        let afterReturn = outageReport.reconnectNanoseconds
        let connects = outageReport.connectNanoseconds
        json.add("outages", outageReport.outcomes.count)
        json.add("connections_survived_outage", outageReport.survived)
        json.add("after_return_reconnects", afterReturn.count)
        json.add("after_return_reconnect_p50_ms", OutageReport.milliseconds(afterReturn, quantile: 0.5), decimals: 0)
        json.add("after_return_reconnect_p90_ms", OutageReport.milliseconds(afterReturn, quantile: 0.9), decimals: 0)
        json.add("after_return_reconnect_max_ms", OutageReport.milliseconds(afterReturn, quantile: 1.0), decimals: 0)
        json.add("after_return_not_reconnected", outageReport.notReconnected)
        json.add("after_return_connect_p50_ms", OutageReport.milliseconds(connects, quantile: 0.5), decimals: 0)
        json.add("after_return_connect_p90_ms", OutageReport.milliseconds(connects, quantile: 0.9), decimals: 0)
        json.add("after_return_connect_max_ms", OutageReport.milliseconds(connects, quantile: 1.0), decimals: 0)
        json.add("latency_p50_ms", result.latencyMilliseconds(0.5), decimals: 0)
        json.add("latency_p99_ms", result.latencyMilliseconds(0.99), decimals: 0)
        json.add("proxy_cuts", stats.cuts)
        json.add("proxy_stalls", stats.stalls)
        json.add("proxy_connections", stats.connectionsAccepted)
        json.add("proxy_refused", stats.connectionsRefused)
        if let error = result.firstError { json.add("first_error", error) }
        return json
    }

    /// Runs the outages of `schedule` (offsets from `start`): at each start the proxy
    /// silences every open connection as `mode` says (never a reset) and refuses new ones; at
    /// each end it accepts again (and forwards the held connections again), and every client
    /// hears `networkAvailable()` (`hold`: the same network is back) or `networkChanged()`
    /// (`blackhole`: back on another network). If cancelled during an outage, the network comes back at
    /// once.
    private static func runOutages(
        _ schedule: OutageSchedule, mode: OutageMode, from start: ContinuousClock.Instant, proxy: FaultProxy,
        clients: [IMClient], ledger: WeakLedger
    ) async {
        for (index, outage) in schedule.outages.enumerated() {
            try? await Task.sleep(until: start + outage.start, clock: .continuous)
            guard !Task.isCancelled else { return }
            proxy.refuseNew(true)
            switch mode {
            case .hold: proxy.holdAll(true)
            case .blackhole: proxy.blackholeAll()
            }
            await ledger.outageBegan(at: MonotonicClock.nanoseconds())
            Log.info("weak: outage \(index + 1): network down for \(Self.formatSeconds(outage.duration)) s")
            try? await Task.sleep(until: start + outage.end, clock: .continuous)
            if mode == .hold { proxy.holdAll(false) }
            proxy.refuseNew(false)
            await ledger.outageEnded(at: MonotonicClock.nanoseconds())
            // What the platform tells the app: coverage back on the same network
            // (networkAvailable: a live connection proves itself with one probe), or back on
            // another one (networkChanged: connections over the old one are replaced at once).
            await withTaskGroup(of: Void.self) { group in
                for client in clients {
                    group.addTask {
                        switch mode {
                        case .hold: await client.networkAvailable()
                        case .blackhole: await client.networkChanged()
                        }
                    }
                }
            }
            let call = mode == .hold ? "networkAvailable()" : "networkChanged()"
            Log.info("weak: outage \(index + 1) over: network back, \(call) on \(clients.count) devices")
        }
    }

    /// One line on what an outage did, for stderr.
    private static func describe(_ outcome: OutageReport.Outcome, number: Int) -> String {
        let length = Double(outcome.window.back - outcome.window.down) / 1e9
        var text = "outage \(number) (\(String(format: "%.1f", length)) s): \(outcome.survived) connection(s) survived"
        let reconnects = outcome.reconnects.map { reconnect in
            let lost = reconnect.lost.map { "lost at \($0 / 1_000_000) ms, " } ?? ""
            return "\(reconnect.device) \(lost)back at \(reconnect.nanoseconds / 1_000_000) ms"
        }
        text += ", \(reconnects.count) reconnected after the return"
            + (reconnects.isEmpty ? "" : " (from the return: \(reconnects.joined(separator: "; ")))")
        if !outcome.connects.isEmpty {
            text += ", first new connection(s) at the proxy after " + outcome.connects.map { "\(Int(Double($0) / 1e6)) ms" }.joined(separator: ", ")
        }
        if !outcome.notReconnected.isEmpty {
            text += "; NOT reconnected before the next outage or the end: \(outcome.notReconnected.joined(separator: ", "))"
        }
        return text
    }

    /// `duration` in seconds with one decimal.
    private static func formatSeconds(_ duration: Duration) -> String {
        String(format: "%.1f", Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18)
    }

    private func configuration(_ token: String, _ proxy: FaultProxy) -> IMClient.Configuration {
        var configuration = IMClient.Configuration(host: "127.0.0.1", port: proxy.port, token: token, deviceID: "phone")
        configuration.sendTimeout = nil  // delivered is the question: never give up
        configuration.connectTimeout = .seconds(10)
        return configuration
    }
}

/// What a weak-network run saw: per pair, what was sent, ACKed and received (once, in
/// which order), every reconnect's duration, and what the outages did (each device's
/// reconnect events, the outages' times, the proxy's accepts) for an ``OutageReport``.
actor WeakLedger {
    struct Snapshot {
        var sent = 0
        var acked = 0
        var received = 0
        var duplicates = 0
        var orderViolations = 0
        var failures = 0
        var reconnects = 0
        var reconnectNanos: [UInt64] = []
        /// Outages begun.
        var outages = 0
        /// Whether an outage is under way.
        var networkDown = false
        var latencies = Histogram<UInt64>(highestTrackableValue: 600_000, numberOfSignificantValueDigits: .three)  // ms
        var firstError: String?

        func reconnectMilliseconds(_ quantile: Double) -> Double? {
            guard !reconnectNanos.isEmpty else { return nil }
            let sorted = reconnectNanos.sorted()
            let index = min(sorted.count - 1, Int((Double(sorted.count) * quantile).rounded(.up)) - 1)
            return Double(sorted[max(0, index)]) / 1e6
        }

        func latencyMilliseconds(_ quantile: Double) -> Double? {
            latencies.totalCount == 0 ? nil : Double(latencies.valueAtPercentile(quantile * 100))
        }
    }

    private(set) var snapshot = Snapshot()
    private var seen: [Set<Int>]
    private var highest: [Int]
    /// Senders (s0, s1, ...) then receivers (r0, r1, ...), as in `watch(_:device:pair:)`.
    private var devices: [OutageReport.Device]
    private var windows: [OutageReport.Window] = []
    private var downSince: UInt64?
    private var accepts: [UInt64] = []
    private var acceptedSeen: Int?

    init(pairs: Int) {
        seen = Array(repeating: [], count: pairs)
        highest = Array(repeating: -1, count: pairs)
        devices = (0..<pairs).map { OutageReport.Device(name: "s\($0)", events: []) }
            + (0..<pairs).map { OutageReport.Device(name: "r\($0)", events: []) }
    }

    /// Whether some message that was sent has not arrived yet.
    var isMissingMessages: Bool { snapshot.received < snapshot.sent }

    func sent(pair: Int) { snapshot.sent += 1 }
    func acked(pair: Int) { snapshot.acked += 1 }
    func failed(pair: Int, error: String) {
        snapshot.failures += 1
        if snapshot.firstError == nil { snapshot.firstError = error }
    }

    /// The network went away at `instant` (``MonotonicClock/nanoseconds()``).
    func outageBegan(at instant: UInt64) {
        downSince = instant
        snapshot.outages += 1
        snapshot.networkDown = true
    }

    /// The network came back at `instant`.
    func outageEnded(at instant: UInt64) {
        if let downSince { windows.append(OutageReport.Window(down: downSince, back: instant)) }
        downSince = nil
        snapshot.networkDown = false
    }

    /// The proxy has accepted `total` connections so far, as seen at `instant`: the first
    /// call sets the base, later ones record one accept per connection more.
    func proxyAccepted(total: Int, at instant: UInt64) {
        defer { acceptedSeen = max(acceptedSeen ?? total, total) }
        guard let before = acceptedSeen, total > before else { return }
        accepts.append(contentsOf: repeatElement(instant, count: total - before))
    }

    /// What the outages did, from everything recorded so far; `connectionsSurvive` as in
    /// ``OutageReport/init(windows:devices:accepts:connectionsSurvive:)``.
    func outageReport(connectionsSurvive: Bool) -> OutageReport {
        OutageReport(windows: windows, devices: devices, accepts: accepts, connectionsSurvive: connectionsSurvive)
    }

    /// Follows one client's events: messages (receivers), reconnect durations (all), and
    /// the losses and logins of device number `device` for the ``OutageReport``.
    func watch(_ client: IMClient, device: Int, pair: Int?) async {
        var lostAt: UInt64?
        for await event in client.events {
            switch event {
            case .message(let message):
                guard let pair else { continue }
                let parts = message.text?.split(separator: " ") ?? []
                guard parts.count == 2, let sequence = Int(parts[0]), let sentAt = UInt64(parts[1]) else { continue }
                record(pair: pair, sequence: sequence, sentAt: sentAt)
            case .reconnecting:
                let now = MonotonicClock.nanoseconds()
                if lostAt == nil { lostAt = now }
                note(.lost, at: now, device: device)
            case .reconnected:
                let now = MonotonicClock.nanoseconds()
                if let since = lostAt {
                    snapshot.reconnects += 1
                    snapshot.reconnectNanos.append(now - since)
                }
                lostAt = nil
                note(.restored, at: now, device: device)
            default:
                break
            }
        }
    }

    private func note(_ kind: OutageReport.DeviceEvent.Kind, at instant: UInt64, device: Int) {
        guard devices.indices.contains(device) else { return }
        devices[device].events.append(OutageReport.DeviceEvent(kind: kind, at: instant))
    }

    private func record(pair: Int, sequence: Int, sentAt: UInt64) {
        guard seen[pair].insert(sequence).inserted else {
            snapshot.duplicates += 1  // surfaced twice by the client: its dedup failed
            return
        }
        snapshot.received += 1
        if sequence < highest[pair] { snapshot.orderViolations += 1 }
        highest[pair] = max(highest[pair], sequence)
        let now = MonotonicClock.nanoseconds()
        _ = snapshot.latencies.record(now > sentAt ? (now - sentAt) / 1_000_000 : 0)
    }
}
