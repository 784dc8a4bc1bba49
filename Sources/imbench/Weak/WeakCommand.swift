import ArgumentParser
import FaultProxy
import Foundation
import Histogram
import IMClient
import IMGateway

/// `imbench weak`: chat on a bad network. Every device (IMClient, with its reconnect,
/// heartbeat and outbox) reaches the gateway through a ``FaultProxy`` that adds latency,
/// stalls and connection cuts; senders post a steady stream for `seconds`, then the faults
/// stop and everything is drained. Reports what arrived (once, in order) and how long
/// reconnects took.
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

    @Option(help: "Seconds to wait, after the faults stop, for every message to arrive.")
    var drain: Double = 120

    @Option(help: "Seed for the proxy's randomness (reproducible fault sequence).")
    var seed: UInt64?

    @OptionGroup var environment: EnvironmentOptions

    func validate() throws {
        guard seconds > 0, pairs >= 1, rate > 0, drain > 0 else {
            throw ValidationError("--seconds, --pairs, --rate and --drain must be positive")
        }
        guard latencyRange != nil else { throw ValidationError("--latency wants MIN-MAX in milliseconds, e.g. 200-800") }
    }

    var latencyRange: ClosedRange<Duration>? {
        let parts = latency.split(separator: "-").compactMap { Int($0) }
        guard parts.count == 2, parts[0] >= 0, parts[0] <= parts[1] else { return nil }
        return .milliseconds(parts[0]) ... .milliseconds(parts[1])
    }

    func run() async throws {
        let env = try await BenchEnvironment.start(environment)
        do {
            let json = try await measure(env)
            await env.shutdown()
            json.print()
        } catch {
            let diagnostics = env.diagnostics
            await env.shutdown()
            throw BenchError("\(error)" + (diagnostics.isEmpty ? "" : " (\(diagnostics))"))
        }
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
            watchers.append(Task { await ledger.watch(client, pair: isReceiver ? pair : nil) })
        }
        proxy.setProfile(profile)
        let faultsStart = ContinuousClock.now
        Log.info("weak: sending \(rate) msg/s per pair for \(seconds) s under faults (latency \(latency) ms, "
            + "\(stallsPerMinute) stalls/min, \(cutsPerMinute) cuts/min per connection)")

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
                    + "received \(snapshot.received) reconnects \(snapshot.reconnects) cuts \(stats.cuts) stalls \(stats.stalls)")
            }
        }
        try? await Task.sleep(until: faultsStart + .seconds(seconds), clock: .continuous)
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
        await proxy.stop()

        let result = await ledger.snapshot
        var json = JSONLine()
        json.add("bench", "weak")
        json.add("seconds", seconds, decimals: 1)
        json.add("pairs", pairs)
        json.add("rate_per_pair", rate, decimals: 1)
        json.add("latency_ms", latency)
        json.add("stalls_per_minute", stallsPerMinute, decimals: 1)
        json.add("cuts_per_minute", cutsPerMinute, decimals: 1)
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
        json.add("latency_p50_ms", result.latencyMilliseconds(0.5), decimals: 0)
        json.add("latency_p99_ms", result.latencyMilliseconds(0.99), decimals: 0)
        json.add("proxy_cuts", stats.cuts)
        json.add("proxy_stalls", stats.stalls)
        json.add("proxy_connections", stats.connectionsAccepted)
        if let error = result.firstError { json.add("first_error", error) }
        return json
    }

    private func configuration(_ token: String, _ proxy: FaultProxy) -> IMClient.Configuration {
        var configuration = IMClient.Configuration(host: "127.0.0.1", port: proxy.port, token: token, deviceID: "phone")
        configuration.sendTimeout = nil  // delivered is the question: never give up
        configuration.connectTimeout = .seconds(10)
        return configuration
    }
}

/// What a weak-network run saw: per pair, what was sent, ACKed and received (once, in
/// which order), and every reconnect's duration.
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

    init(pairs: Int) {
        seen = Array(repeating: [], count: pairs)
        highest = Array(repeating: -1, count: pairs)
    }

    /// Whether some message that was sent has not arrived yet.
    var isMissingMessages: Bool { snapshot.received < snapshot.sent }

    func sent(pair: Int) { snapshot.sent += 1 }
    func acked(pair: Int) { snapshot.acked += 1 }
    func failed(pair: Int, error: String) {
        snapshot.failures += 1
        if snapshot.firstError == nil { snapshot.firstError = error }
    }

    /// Follows one client's events: messages (receivers), and reconnect durations (all).
    func watch(_ client: IMClient, pair: Int?) async {
        var lostAt: UInt64?
        for await event in client.events {
            switch event {
            case .message(let message):
                guard let pair else { continue }
                let parts = message.text?.split(separator: " ") ?? []
                guard parts.count == 2, let sequence = Int(parts[0]), let sentAt = UInt64(parts[1]) else { continue }
                record(pair: pair, sequence: sequence, sentAt: sentAt)
            case .reconnecting:
                if lostAt == nil { lostAt = MonotonicClock.nanoseconds() }
            case .reconnected:
                if let since = lostAt {
                    snapshot.reconnects += 1
                    snapshot.reconnectNanos.append(MonotonicClock.nanoseconds() - since)
                }
                lostAt = nil
            default:
                break
            }
        }
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
