import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What /proc says about a process at one moment: resident memory, open descriptors, CPU
/// time (in total and per thread).
struct ProcessSample: Sendable {
    /// The process.
    var pid: pid_t
    /// When the sample was taken (``MonotonicClock/nanoseconds()``).
    var takenAt: UInt64
    /// VmRSS in KiB (/proc/PID/status).
    var rssKiB: Int
    /// Entries of /proc/PID/fd.
    var descriptors: Int
    /// utime + stime in clock ticks (/proc/PID/stat).
    var cpuTicks: Int
    /// Per thread: name (comm) and utime + stime in ticks (/proc/PID/task/TID/stat).
    var threads: [ThreadCPU]

    struct ThreadCPU: Sendable {
        var tid: Int
        var name: String
        var cpuTicks: Int
    }

    /// Clock ticks per second (USER_HZ).
    static let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// Samples `pid`; nil if it is gone.
    static func take(_ pid: pid_t, threads withThreads: Bool = false) -> ProcessSample? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let stat = Self.stat("/proc/\(pid)/stat")
        else { return nil }
        var rss = 0
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            rss = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? 0
        }
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? 0
        var threads: [ThreadCPU] = []
        if withThreads, let tids = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") {
            for tid in tids {
                if let thread = Self.stat("/proc/\(pid)/task/\(tid)/stat") {
                    threads.append(ThreadCPU(tid: Int(tid) ?? 0, name: thread.name, cpuTicks: thread.ticks))
                }
            }
        }
        return ProcessSample(
            pid: pid, takenAt: MonotonicClock.nanoseconds(), rssKiB: rss, descriptors: fds, cpuTicks: stat.ticks,
            threads: threads)
    }

    /// Name and utime + stime of a stat file (fields 14 and 15; the name may hold spaces).
    private static func stat(_ path: String) -> (name: String, ticks: Int)? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8),
            let open = text.firstIndex(of: "("), let close = text.lastIndex(of: ")")
        else { return nil }
        let name = String(text[text.index(after: open)..<close])
        let fields = text[text.index(after: close)...].split(separator: " ")
        // fields[0] is the state (field 3); utime is field 14, stime field 15.
        guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
        return (name, user + system)
    }

    /// CPU used between `earlier` and this sample, in percent of one core.
    func cpuPercent(since earlier: ProcessSample) -> Double {
        let seconds = Double(takenAt &- earlier.takenAt) / 1e9
        guard seconds > 0 else { return 0 }
        return Double(cpuTicks - earlier.cpuTicks) / Self.ticksPerSecond / seconds * 100
    }

    /// Per-thread CPU between `earlier` and this sample, busiest first, threads of the same
    /// name summed (NIO's threads are numbered, libdispatch's are not named).
    func threadCPUPercent(since earlier: ProcessSample) -> [(name: String, percent: Double)] {
        let seconds = Double(takenAt &- earlier.takenAt) / 1e9
        guard seconds > 0 else { return [] }
        let before = Dictionary(earlier.threads.map { ($0.tid, $0.cpuTicks) }, uniquingKeysWith: { a, _ in a })
        var byName: [String: Int] = [:]
        for thread in threads {
            byName[thread.name, default: 0] += thread.cpuTicks - (before[thread.tid] ?? 0)
        }
        return byName.map { ($0.key, Double($0.value) / Self.ticksPerSecond / seconds * 100) }
            .filter { $0.1 >= 0.05 }
            .sorted { $0.1 > $1.1 }
    }

    /// This process.
    static func ownPID() -> pid_t { getpid() }
}
