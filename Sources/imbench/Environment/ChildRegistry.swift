import ChildProcesses
import Dispatch
import Foundation
import IMGateway
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The processes (broker, gateway) and temporary directories this run created: stopped and
/// removed when the run ends, also on SIGINT and SIGTERM. Processes left behind by an
/// earlier run that was killed with -9 (reparented to init) are swept at start.
final class ChildRegistry: Sendable {
    /// The one registry of this process.
    static let shared = ChildRegistry()

    /// Every temporary directory of imbench starts with this (the sweep looks for it).
    static let directoryPrefix = "imbench-run-"

    private struct State {
        var children: [pid_t: ChildProcess] = [:]
        var directories: [String] = []
        var signalsInstalled = false
        /// What else stops at SIGINT/SIGTERM (processes that are not our children's
        /// ``ChildProcess``es, such as a PostgreSQL server's).
        var onTerminate: [@Sendable () -> Void] = []
    }

    private let state = Mutex(State())
    // nonisolated(unsafe): appended to only by `installSignalHandlers()`, which passes its
    // install-once flag (set under `state`'s lock) on one thread only, and never read: it
    // only keeps the sources alive (dispatch sources are not Sendable, so a Mutex cannot
    // hold them).
    nonisolated(unsafe) private static var signalSources: [any DispatchSourceSignal] = []

    /// Tracks a child until ``forget(_:)``.
    func track(_ child: ChildProcess) {
        installSignalHandlers()
        state.withLock { $0.children[child.pid] = child }
    }

    /// Stops tracking a child that was stopped.
    func forget(_ child: ChildProcess) {
        _ = state.withLock { $0.children.removeValue(forKey: child.pid) }
    }

    /// Runs `body` (synchronously, briefly) when SIGINT or SIGTERM ends the run.
    func onTerminate(_ body: @escaping @Sendable () -> Void) {
        installSignalHandlers()
        state.withLock { $0.onTerminate.append(body) }
    }

    /// Removes `path` at the end of the run.
    func removeLater(_ path: String) {
        state.withLock { $0.directories.append(path) }
    }

    /// Removes the directories registered so far.
    func removeDirectories() {
        let directories = state.withLock { state in
            defer { state.directories.removeAll() }
            return state.directories
        }
        for directory in directories { try? FileManager.default.removeItem(atPath: directory) }
    }

    /// Stops `child`: SIGTERM, then SIGKILL if it has not exited within `grace` seconds.
    static func stop(_ child: ChildProcess, grace: Double) async {
        guard !child.hasExited else { return }
        child.signal(SIGTERM)
        let killer = Task {
            try await Task.sleep(for: .seconds(grace))
            child.signal(SIGKILL)
        }
        await child.waitForExit()
        killer.cancel()
    }

    /// SIGINT/SIGTERM: stop every child (SIGTERM, SIGKILL after 2 s), remove the
    /// directories, exit 130.
    private func installSignalHandlers() {
        let install = state.withLock { state -> Bool in
            defer { state.signalsInstalled = true }
            return !state.signalsInstalled
        }
        guard install else { return }
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [self] in
                Log.info("imbench: signal \(number): stopping the broker and gateway")
                self.terminateAllNow()
                exit(130)
            }
            source.resume()
            Self.signalSources.append(source)
        }
    }

    /// Synchronous teardown for the signal handler.
    private func terminateAllNow() {
        let (children, extra) = state.withLock { (Array($0.children.values), $0.onTerminate) }
        for body in extra { body() }
        for child in children { child.signal(SIGTERM) }
        let deadline = MonotonicClock.nanoseconds() + 2_000_000_000
        while children.contains(where: { !$0.hasExited }) && MonotonicClock.nanoseconds() < deadline {
            usleep(20_000)
        }
        for child in children where !child.hasExited { child.signal(SIGKILL) }
        removeDirectories()
    }

    /// Kills brokers and gateways of earlier imbench runs whose parent is gone.
    static func sweepOrphans() {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return }
        for entry in entries {
            guard let pid = Int32(entry),
                let cmdline = try? String(contentsOfFile: "/proc/\(entry)/cmdline", encoding: .utf8),
                cmdline.contains(directoryPrefix),
                let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, fields[1] == "1" {
                Log.info("imbench: killing \(pid), left behind by an earlier run")
                kill(pid, SIGKILL)
            }
        }
    }
}
