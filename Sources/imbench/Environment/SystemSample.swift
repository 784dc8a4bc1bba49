import Foundation

/// Machine-wide CPU time (/proc/stat) and load average: how busy the machine was besides the
/// processes a benchmark measures (other work on the same cores skews every figure).
struct SystemSample: Sendable {
    /// When the sample was taken (``MonotonicClock/nanoseconds()``).
    var takenAt: UInt64
    /// Busy ticks of all CPUs in processes: user, nice, system, steal.
    var busyTicks: Int
    /// Ticks in interrupts and softirqs (loopback TCP is processed there, charged to no process).
    var interruptTicks: Int
    /// 1-minute load average.
    var loadAverage: Double

    /// Samples /proc/stat and /proc/loadavg.
    static func take() -> SystemSample {
        var busy = 0
        var interrupts = 0
        if let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
            let line = stat.split(separator: "\n").first, line.hasPrefix("cpu ")
        {
            let values = line.split(separator: " ").dropFirst().compactMap { Int($0) }
            // user nice system idle iowait irq softirq steal ...
            for (index, value) in values.prefix(8).enumerated() {
                switch index {
                case 0, 1, 2, 7: busy += value
                case 5, 6: interrupts += value
                default: break
                }
            }
        }
        let load = (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))
            .flatMap { $0.split(separator: " ").first }.flatMap { Double($0) } ?? 0
        return SystemSample(takenAt: MonotonicClock.nanoseconds(), busyTicks: busy, interruptTicks: interrupts, loadAverage: load)
    }

    /// CPU used machine-wide by processes since `earlier`, percent of one core.
    func cpuPercent(since earlier: SystemSample) -> Double {
        percent(busyTicks - earlier.busyTicks, since: earlier)
    }

    /// CPU spent in interrupts and softirqs since `earlier`, percent of one core.
    func interruptPercent(since earlier: SystemSample) -> Double {
        percent(interruptTicks - earlier.interruptTicks, since: earlier)
    }

    private func percent(_ ticks: Int, since earlier: SystemSample) -> Double {
        let seconds = Double(takenAt &- earlier.takenAt) / 1e9
        guard seconds > 0 else { return 0 }
        return Double(ticks) / ProcessSample.ticksPerSecond / seconds * 100
    }
}
