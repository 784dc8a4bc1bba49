import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The timing both chat phases share: start the senders, report once a second, stop after
/// the configured time, wait for what is in flight (the drain), then compute the figures.
enum ChatPhase {
    /// A process whose CPU is measured during the sending window.
    struct Watched: Sendable {
        var label: String
        var pid: pid_t
        /// Also sample its threads (the gateway).
        var threads = false
    }

    /// Runs the measured part of a phase whose clients are connected and logged in.
    /// - Parameters:
    ///   - name: "gateway" or "direct": the result's name.
    ///   - title: The phase in log lines, e.g. "gateway round 2/4" (default: `name`).
    ///   - start: Makes the senders start (returns at once).
    ///   - stop: Makes them stop sending new messages.
    static func measure(
        _ name: String, title: String? = nil, settings: ChatSettings, ledger: ChatLedger, watch: [Watched],
        start: @Sendable () async -> Void, stop: @Sendable () async -> Void
    ) async throws -> ChatPhaseResult {
        try await measure(
            name, title: title, seconds: settings.seconds, drainSeconds: settings.drainSeconds, ledger: ledger, watch: watch,
            start: start, stop: stop)
    }

    /// Runs the measured part of a phase: senders send for `seconds`, then what is in flight
    /// has up to `drainSeconds` to arrive.
    /// - Parameter unit: What the progress line counts per second ("received" of the ledger).
    static func measure(
        _ name: String, title: String? = nil, seconds: Double, drainSeconds: Double, unit: String = "msg/s",
        ledger: some PhaseAccounting, watch: [Watched], start: @Sendable () async -> Void, stop: @Sendable () async -> Void
    ) async throws -> ChatPhaseResult {
        let title = title ?? name
        let systemBefore = SystemSample.take()
        let before = watch.map { ProcessSample.take($0.pid, threads: $0.threads) }
        let startedAt = MonotonicClock.nanoseconds()
        await start()
        let progress = Task { await printProgress(title, unit: unit, ledger: ledger, startedAt: startedAt, seconds: seconds) }
        try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
        let atEnd = ledger.totals()
        let elapsed = MonotonicClock.seconds(since: startedAt)
        await stop()
        progress.cancel()
        let after = watch.map { ProcessSample.take($0.pid, threads: $0.threads) }
        let systemAfter = SystemSample.take()

        let drainStart = MonotonicClock.nanoseconds()
        while !ledger.isDrained() && MonotonicClock.seconds(since: drainStart) < drainSeconds {
            try await Task.sleep(for: .milliseconds(20))
        }
        let drained = ledger.isDrained()
        let report = ledger.report()
        Log.info(
            "\(title): drained \(drained ? "completely" : "partly") in \(String(format: "%.2f", MonotonicClock.seconds(since: drainStart))) s; "
                + "sent \(report.totals.sent), acked \(report.totals.acked), refused \(report.totals.refused), "
                + "received \(report.totals.received), lost \(report.lost), duplicates \(report.totals.duplicates)"
                + (report.firstError.map { "; first error: \($0)" } ?? ""))

        var cpu: [String: Double] = [:]
        var threads: [(name: String, percent: Double)] = []
        for (index, watched) in watch.enumerated() {
            guard let b = before[index], let a = after[index] else { continue }
            cpu[watched.label] = a.cpuPercent(since: b)
            if watched.threads { threads = a.threadCPUPercent(since: b) }
        }
        // Everything else on the machine: what competed with the measured processes.
        cpu["other"] = max(0, systemAfter.cpuPercent(since: systemBefore) - cpu.values.reduce(0, +))
        cpu["softirq"] = systemAfter.interruptPercent(since: systemBefore)
        let cpuText = (watch.map(\.label) + ["other", "softirq"]).compactMap { label in cpu[label].map { "\(label) \(Int($0.rounded()))%" } }.joined(separator: ", ")
        Log.info("\(title): CPU during the run (percent of one core): \(cpuText)")
        if !threads.isEmpty {
            Log.info("\(title): gateway threads: " + threads.map { "\($0.name) \(Int($0.percent.rounded()))%" }.joined(separator: ", "))
        }
        return ChatPhaseResult(
            name: name, elapsed: elapsed, receivedInWindow: atEnd.received,
            messagesPerSecond: Double(atEnd.received) / elapsed, report: report, cpu: cpu, gatewayThreads: threads,
            loadAverage: systemBefore.loadAverage, flood: nil)
    }

    /// One line per second: received per second, p99 so far, totals.
    private static func printProgress(_ name: String, unit: String, ledger: some PhaseAccounting, startedAt: UInt64, seconds: Double) async {
        var previous = ledger.totals()
        var tick = 1
        while !Task.isCancelled {
            let due = startedAt + UInt64(tick) * 1_000_000_000
            let now = MonotonicClock.nanoseconds()
            if due > now { try? await Task.sleep(for: .nanoseconds(Int64(due - now))) }
            if Task.isCancelled { return }
            let totals = ledger.totals()
            Log.info(
                name
                    + String(
                        format: " %3d/%d s  %8d \(unit)  p99 %7.3f ms  sent %d acked %d received %d",
                        tick, Int(seconds.rounded(.up)), totals.received - previous.received, totals.p99Milliseconds,
                        totals.sent, totals.acked, totals.received))
            previous = totals
            tick += 1
        }
    }
}
