import CProcessShims
import Foundation

#if canImport(Glibc)
import Glibc
import Synchronization
#endif

/// What /proc says about a process's descriptors and threads.
package enum ProcessDescriptors {
    /// The socket inodes a process holds open (`socket:[N]` links under /proc/PID/fd).
    package static func socketInodes(of pid: pid_t) -> Set<UInt64> {
        var inodes = Set<UInt64>()
        for (_, target) in links(of: pid) {
            if target.hasPrefix("socket:["), let inode = UInt64(target.dropFirst(8).dropLast()) { inodes.insert(inode) }
        }
        return inodes
    }

    /// Every descriptor of a process with its link target (`socket:[N]`, `pipe:[N]`, a path).
    package static func links(of pid: pid_t) -> [(fd: Int32, target: String)] {
        let directory = "/proc/\(pid)/fd"
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        return names.compactMap { name in
            guard let fd = Int32(name), let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "\(directory)/\(name)") else { return nil }
            return (fd, target)
        }.sorted { $0.fd < $1.fd }
    }

    /// Whether a process's descriptor is close-on-exec (the `flags` line of /proc/PID/fdinfo);
    /// nil when it is not open (any more).
    package static func isCloseOnExec(_ fd: Int32, of pid: pid_t) -> Bool? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/fdinfo/\(fd)", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("flags:") }),
              let flags = Int(line.split(separator: "\t").last?.trimmingCharacters(in: .whitespaces) ?? "", radix: 8)
        else { return nil }
        return flags & Int(O_CLOEXEC) != 0
    }

    /// This process's TCP socket connected to 127.0.0.1:`port` (the only one, or nil).
    package static func ownSocket(connectedTo port: Int) -> Int32? {
        let found = links(of: getpid()).filter { $0.target.hasPrefix("socket:") }.map(\.fd).filter { fd in
            var address = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let rc = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) }
            }
            return rc == 0 && Int32(address.sin_family) == AF_INET && Int(UInt16(bigEndian: address.sin_port)) == port
        }
        return found.count == 1 ? found[0] : nil
    }

    /// CPU seconds (user + system) of this process's thread named `name`.
    package static func threadCPU(named name: String) -> Double? {
        let tasks = "/proc/self/task"
        guard let ids = try? FileManager.default.contentsOfDirectory(atPath: tasks) else { return nil }
        for id in ids {
            guard let comm = try? String(contentsOfFile: "\(tasks)/\(id)/comm", encoding: .utf8),
                  comm.trimmingCharacters(in: .whitespacesAndNewlines) == name,
                  let stat = try? String(contentsOfFile: "\(tasks)/\(id)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
            return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
        }
        return nil
    }
}

/// A child process (`sleep`) that holds a copy of one of this process's descriptors as its
/// descriptor 3, and nothing else of ours: what a child that inherited a socket looks like.
package final class DescriptorHolder: Sendable {
    package let pid: pid_t
    private let stopped = Atomic(false)

    package init(holding fd: Int32) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, fd, 3)
        guard cproc_spawn_addclosefrom(&actions, 4) == 0 else { throw TestError("closefrom not supported") }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
        let argv: [UnsafeMutablePointer<CChar>?] = ["/bin/sleep", "60"].map { (word: String) in strdup(word) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, "/bin/sleep", &actions, &attributes, argv, environ)
        guard rc == 0 else { throw TestError("posix_spawn: \(rc)") }
        self.pid = pid
        TestResources.track { [self] in stop() }
    }

    /// Kills and reaps the child (once; later calls do nothing).
    package func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        kill(pid, SIGKILL)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }
}
