import AsyncToolkit
import CProcessShims
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A child process started with posix_spawn (or, when it must not outlive us, forked with a
/// parent-death signal), a clean signal mask and default signal handlers, its output read
/// line by line.
///
/// The child gets /dev/null as stdin, the output pipe as stdout and stderr, and no other
/// descriptor of ours: every descriptor above 2 is closed in the child
/// (`posix_spawn_file_actions_addclosefrom_np`, glibc 2.34), whether or not it was opened
/// close-on-exec (libmosquitto's and SwiftNIO's sockets are not, until they are marked).
///
/// Not swift-subprocess: it runs a child inside a closure's scope and has no parent-death
/// signal, while the embedded broker lives as long as the gateway, and must die with it when
/// imgw is killed with -9.
///
/// Not Foundation's `Process`: it hands the child the spawning thread's signal mask
/// (Swift's threads block SIGTERM and SIGINT, and a mosquitto started that way ignores
/// SIGTERM for good), and on Linux it watches children with `select`, which fails once a
/// descriptor passes 1023.
public final class ChildProcess: Sendable {
    /// The child's pid.
    public let pid: pid_t
    /// stdout and stderr, line by line; finishes when the child closes them.
    public let lines: AsyncStream<String>
    /// The wait status, once the child has been reaped.
    private let exit = AsyncCondition<Int32?>(nil)

    /// Starts `executable` with `arguments`, in `workingDirectory` if given. With
    /// `parentDeathSignal`, the child gets that signal when this process ends, however it
    /// ends (kill -9 included): a child that must never outlive us, like the embedded broker.
    public init(executable: String, arguments: [String], workingDirectory: String? = nil, parentDeathSignal: Int32? = nil) throws {
        var pipe: [Int32] = [-1, -1]
        guard cproc_pipe_cloexec(&pipe) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        let pid: pid_t
        if let parentDeathSignal {
            pid = try Self.spawnTied(executable, arguments, workingDirectory, output: pipe, signal: parentDeathSignal)
        } else {
            pid = try Self.spawn(executable, arguments, workingDirectory, output: pipe)
        }
        self.pid = pid
        let (lines, sink) = AsyncStream.makeStream(of: String.self)
        self.lines = lines
        Self.watch(pid, output: pipe[0], exit: exit, sink: sink)
    }

    /// posix_spawn with a clean signal mask, default handlers, /dev/null as stdin, `pipe`'s
    /// write end as stdout and stderr (closed here, as is the read end on failure).
    private static func spawn(_ executable: String, _ arguments: [String], _ workingDirectory: String?, output pipe: [Int32]) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, pipe[1], 1)
        posix_spawn_file_actions_adddup2(&actions, pipe[1], 2)
        // Everything else goes, the pipe's own descriptors included.
        var prepared = cproc_spawn_addclosefrom(&actions, 3)
        if let workingDirectory, prepared == 0 {
            prepared = cproc_spawn_addchdir(&actions, workingDirectory)
        }
        guard prepared == 0 else {
            close(pipe[0])
            close(pipe[1])
            throw POSIXError(POSIXErrorCode(rawValue: prepared) ?? .EINVAL)
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
        close(pipe[1])
        guard rc == 0 else {
            close(pipe[0])
            throw POSIXError(POSIXErrorCode(rawValue: rc) ?? .EIO)
        }
        return pid
    }

    /// Forks and execs `executable` with the same settings as ``spawn(_:_:_:output:)``, and
    /// `signal` as its parent-death signal (CProcessShims: posix_spawn cannot set one).
    private static func spawnTied(_ executable: String, _ arguments: [String], _ workingDirectory: String?, output pipe: [Int32], signal: Int32) throws -> pid_t {
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let rc = argv.withUnsafeBufferPointer { argv in
            cproc_spawn_with_death_signal(&pid, executable, argv.baseAddress, environ, pipe[1], workingDirectory, signal)
        }
        close(pipe[1])
        guard rc == 0 else {
            close(pipe[0])
            throw POSIXError(POSIXErrorCode(rawValue: rc) ?? .EIO)
        }
        return pid
    }

    /// Reads the child's output from `readFD` into `sink` on a thread of its own, then
    /// reaps the child.
    private static func watch(_ childPID: pid_t, output readFD: Int32, exit: AsyncCondition<Int32?>, sink: AsyncStream<String>.Continuation) {
        Thread.detachNewThread {
            var pending = [UInt8]()
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(readFD, &buffer, buffer.count)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                pending.append(contentsOf: buffer[0..<count])
                while let newline = pending.firstIndex(of: 10) {
                    sink.yield(String(decoding: pending[..<newline], as: UTF8.self))
                    pending.removeSubrange(...newline)
                }
            }
            if !pending.isEmpty { sink.yield(String(decoding: pending, as: UTF8.self)) }
            sink.finish()
            close(readFD)
            // Wait for the exit without reaping, then reap under the lock that signal()
            // takes: a signal can never reach a pid that was reaped and reused.
            var info = siginfo_t()
            while waitid(P_PID, id_t(childPID), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR {}
            exit.withLock { state in
                var status: Int32 = 0
                while waitpid(childPID, &status, 0) < 0 && errno == EINTR {}
                state = status
            }
        }
    }

    /// Sends a signal (SIGTERM by default); does nothing once the child has been reaped.
    public func signal(_ signal: Int32 = SIGTERM) {
        exit.read { status in
            if status == nil { kill(pid, signal) }
        }
    }

    /// Whether the child has been reaped.
    public var hasExited: Bool { exit.read { $0 != nil } }

    /// Reads the child's output for as long as it runs, handing every line to `onLine`, and
    /// returns once a line contains `marker` (true), or the output ended or `timeout` passed
    /// (false); without a marker it returns at once. Reading goes on after the return.
    /// Call it once: it takes ``lines``.
    public func follow(until marker: String?, within timeout: Duration, onLine: @escaping @Sendable (String) -> Void) async -> Bool {
        let (ready, readySink) = AsyncStream.makeStream(of: Bool.self)
        let lines = self.lines
        Task {
            for await line in lines {
                onLine(line)
                if let marker, line.contains(marker) { readySink.yield(true) }
            }
            readySink.yield(false)
        }
        guard marker != nil else { return true }
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await value in ready { return value }
                return false
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            readySink.finish()
            return first
        }
    }

    /// Waits for the child to exit; returns its wait status.
    @discardableResult
    public func waitForExit() async -> Int32 {
        // Not cancellable: the child is reaped whatever the caller does meanwhile.
        await Task { [exit] in await exit.wait { $0 } ?? 0 }.value
    }
}
