import AsyncToolkit
import Foundation
import ChildProcesses
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A real PostgreSQL server (Debian's, the highest version under /usr/lib/postgresql) started
/// for a test or a benchmark run: a cluster of its own made by `initdb` in a temporary
/// directory (user `imgw`, trust authentication, a database `imgw`), listening on a loopback
/// port, its socket in that directory. The tests (IMTestSupport's `TestPostgres`) and
/// `imbench chaos` use it.
///
/// The server is the caller's own child process: `postgres` itself, not `pg_ctl` (which would
/// leave it to init), so that the caller can stop it, SIGKILL it (``kill9()``) or freeze it
/// (``freeze()``) and start it again on the same port and data (``restart()``). As root
/// (CI), where initdb and postgres refuse to run, both run as the `postgres` user through
/// `setpriv`, which execs (`runuser` would fork, and stand between the caller and the server's
/// pid); otherwise as the caller's own user.
///
/// `fsync` is off unless ``Options/fsync`` asks for it: a commit is still written to the
/// kernel before it returns, so a killed server (every process of it) loses nothing it
/// acknowledged; only a power loss would, which no test makes.
package final class PostgresServer: Sendable {
    /// How the server runs.
    package struct Options: Sendable {
        /// fsync at commits and checkpoints, as in production (slower: a test of durability
        /// across a crash of the machine would want it; none of ours can make one).
        package var fsync = false
        /// More `-c name=value` settings.
        package var settings: [String] = []
        package init() {}
    }

    /// The server's port on 127.0.0.1.
    package let port: Int
    /// The test's directory: `data` (the cluster) and the server's socket.
    package let directory: URL
    package let options: Options
    /// Where initdb, postgres, pg_isready and createdb are.
    package let binaries: URL
    /// What the server printed, over all its starts.
    private let log = Mutex("")
    /// The running server, if any.
    private let server = Mutex<ChildProcess?>(nil)
    /// Starts and stops one at a time.
    private let lifecycle = AsyncSemaphore(limit: 1)

    /// The database user.
    package static let user = "imgw"
    /// The database the tests use (created at start).
    package static let database = "imgw"

    /// `archive.url` for the test's database.
    package var url: String { url(database: Self.database) }

    /// `archive.url` for another database of the server (see ``createDatabase(_:)``).
    package func url(database: String) -> String { "postgres://\(Self.user)@127.0.0.1:\(port)/\(database)" }

    package var dataDirectory: URL { directory.appendingPathComponent("data") }

    /// The postmaster's pid, while it runs.
    package var pid: Int32? { server.withLock { $0?.pid } }

    /// What the server printed so far.
    package var output: String { log.withLock { $0 } }

    /// In the environment of every server process the tests start (the backends inherit it):
    /// what ``sweepOrphans`` looks for.
    package static let orphanMark = "IMGW_TEST_POSTGRES=1"

    /// Makes a cluster, starts the server on `port` and creates the database; returns once it
    /// accepts connections. `cleanup` is given the server's ``stop()`` as soon as there is
    /// something to clean up (a test registers it with its resources).
    package static func start(
        _ options: Options = Options(), port: Int, cleanup: (@escaping @Sendable () async -> Void) -> Void = { _ in }
    ) async throws -> PostgresServer {
        _ = sweepOrphans
        let binaries = try binDirectory()
        let root = temporaryRoot()
        let directory = root.appendingPathComponent("imgw-postgres-\(String(UInt32.random(in: 0...UInt32.max), radix: 36))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let postgres = PostgresServer(port: port, directory: directory, options: options, binaries: binaries)
        cleanup { await postgres.stop() }
        if geteuid() == 0 {
            guard let account = getpwnam("postgres") else {
                throw PostgresServerError("running as root, PostgreSQL runs as the postgres user, and there is none (apt-get install postgresql)")
            }
            guard chown(directory.path, account.pointee.pw_uid, account.pointee.pw_gid) == 0 else {
                throw PostgresServerError("cannot give \(directory.path) to the postgres user: \(String(cString: strerror(errno)))")
            }
        }
        chmod(directory.path, 0o700)
        // -N: no fsync of the new cluster (a second saved per start).
        let (status, output) = try await runCapturing(
            "/usr/bin/env",
            command("initdb", ["-D", postgres.dataDirectory.path, "-A", "trust", "-U", user, "-E", "UTF8", "--locale=C", "-N"], binaries: binaries),
            in: directory)
        guard status == 0 else { throw PostgresServerError("initdb failed (wait status \(status)): \(output)") }
        try await postgres.startServer()
        try await postgres.client("createdb", ["-h", "127.0.0.1", "-p", "\(postgres.port)", "-U", user, database])
        return postgres
    }

    private init(port: Int, directory: URL, options: Options, binaries: URL) {
        self.port = port
        self.directory = directory
        self.options = options
        self.binaries = binaries
    }

    /// `/usr/bin/env` arguments that run one of the server's programs: with the orphan mark,
    /// as the postgres user when the test runs as root.
    private static func command(_ program: String, _ arguments: [String], binaries: URL) -> [String] {
        let path = binaries.appendingPathComponent(program).path
        let user = geteuid() == 0 ? ["/usr/bin/setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"] : []
        return [orphanMark, "LC_ALL=C"] + user + [path] + arguments
    }

    /// Runs a client program of the server's version (createdb, psql...) as the test's user.
    @discardableResult
    package func client(_ program: String, _ arguments: [String]) async throws -> String {
        let executable = binaries.appendingPathComponent(program).path
        let (status, output) = try await Self.runCapturing(executable, arguments)
        guard status == 0 else {
            throw PostgresServerError("\(executable) \(arguments.joined(separator: " ")) failed (wait status \(status)): \(output)")
        }
        return output
    }

    /// psql's arguments for the test's database: no psqlrc, quiet, stopping at the first error
    /// (`client("psql", psqlArguments + ["-c", SQL])`).
    package var psqlArguments: [String] {
        ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", "\(port)", "-U", Self.user, "-d", Self.database]
    }

    /// Creates another database; returns its URL.
    package func createDatabase(_ name: String) async throws -> String {
        try await client("createdb", ["-h", "127.0.0.1", "-p", "\(port)", "-U", Self.user, name])
        return url(database: name)
    }

    // MARK: Starting and stopping

    /// Starts the server on the cluster (after ``stopServer()`` or ``kill9()``: on the same
    /// port and data; a killed one recovers from its WAL first) and returns once it accepts
    /// connections, or throws with its output after 60 s.
    package func startServer() async throws {
        try await lifecycle.run { try await self.launch() }
    }

    private func launch() async throws {
        guard server.withLock({ $0 == nil }) else { return }
        var settings = ["listen_addresses=127.0.0.1", "fsync=\(options.fsync ? "on" : "off")", "max_connections=100"]
        settings += options.settings
        let mark = log.withLock { $0.utf8.count }
        let process = try ChildProcess(
            executable: "/usr/bin/env",
            arguments: Self.command(
                "postgres",
                ["-D", dataDirectory.path, "-p", "\(port)", "-k", directory.path] + settings.flatMap { ["-c", $0] },
                binaries: binaries),
            workingDirectory: directory.path)
        server.withLock { $0 = process }
        // False at once if the server exits (a port taken, a cluster it cannot recover).
        let ready = await process.follow(until: "database system is ready to accept connections", within: .seconds(60)) { line in
            self.log.withLock { $0 += line + "\n" }
        }
        guard ready, !process.hasExited else {
            process.signal(SIGKILL)
            _ = await process.waitForExit()
            server.withLock { $0 = nil }
            throw PostgresServerError("PostgreSQL did not start on port \(port): \(String(decoding: output.utf8.dropFirst(mark), as: UTF8.self))")
        }
        // The log line comes when the postmaster accepts; pg_isready says the same from a
        // client's side (bounded: a server that says ready and does not answer is a failure).
        let deadline = ContinuousClock.now + .seconds(30)
        while true {
            let (status, answer) = try await Self.runCapturing(
                binaries.appendingPathComponent("pg_isready").path, ["-h", "127.0.0.1", "-p", "\(port)", "-U", Self.user, "-t", "5"])
            if status == 0 { break }
            guard ContinuousClock.now < deadline, !process.hasExited else {
                throw PostgresServerError("PostgreSQL on port \(port) does not accept connections (\(answer)): \(output)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Fast shutdown (SIGINT: clients are disconnected, open transactions rolled back, a
    /// checkpoint written), SIGKILL of every process of the server if it has not ended after
    /// 30 s; the cluster is kept (``startServer()`` starts it again).
    package func stopServer() async {
        _ = try? await lifecycle.run { await self.shutDown() }
    }

    private func shutDown() async {
        guard let process = server.withLock({ $0 }) else { return }
        // A frozen server must be able to hear it.
        for pid in processes(of: process.pid) { kill(pid, SIGCONT) }
        process.signal(SIGCONT)
        process.signal(SIGINT)
        let timer = Task {
            try await Task.sleep(for: .seconds(30))
            await self.killAll(process)
        }
        _ = await process.waitForExit()
        timer.cancel()
        await awaitGone(processes(of: process.pid))
        server.withLock { $0 = nil }
    }

    /// ``stopServer()`` then ``startServer()``: the same port and data.
    package func restart() async throws {
        await stopServer()
        try await startServer()
    }

    /// SIGKILL of the postmaster and every backend at once, as a crash of the machine would
    /// (without losing what the kernel was given); returns once all are gone. The next
    /// ``startServer()`` recovers from the WAL.
    package func kill9() async {
        _ = try? await lifecycle.run {
            guard let process = self.server.withLock({ $0 }) else { return }
            await self.killAll(process)
            self.server.withLock { $0 = nil }
        }
    }

    private func killAll(_ process: ChildProcess) async {
        // Stopped first, so that it forks no backend between the listing and the kill.
        process.signal(SIGSTOP)
        let children = processes(of: process.pid)
        for pid in children { kill(pid, SIGKILL) }
        process.signal(SIGKILL)
        _ = await process.waitForExit()
        await awaitGone(children)
        removeSharedMemory()
    }

    /// SIGSTOP to every process of the server: it neither answers nor closes connections
    /// (a server that hangs, or a network that drops everything). ``thaw()`` ends it.
    package func freeze() {
        guard let pid = pid else { return }
        // The postmaster first: it forks no backend after the listing.
        kill(pid, SIGSTOP)
        for child in processes(of: pid) { kill(child, SIGSTOP) }
    }

    /// SIGCONT to every process of the server.
    package func thaw() {
        guard let pid = pid else { return }
        for child in processes(of: pid) { kill(child, SIGCONT) }
        kill(pid, SIGCONT)
    }

    /// Stops the server (fast shutdown) and removes the directory.
    package func stop() async {
        await stopServer()
        try? FileManager.default.removeItem(at: directory)
    }

    deinit {
        // A server left running by a test that never got to stop it.
        server.withLock { $0 }?.signal(SIGKILL)
    }

    /// The postmaster's own SysV segment (its interlock; the rest of its shared memory is
    /// anonymous) outlives a killed server: removed once every process is gone, so that tests
    /// that kill servers leave nothing behind. Its key and id are in postmaster.pid's 7th line.
    private func removeSharedMemory() {
        let file = dataDirectory.appendingPathComponent("postmaster.pid")
        guard let text = try? String(contentsOf: file, encoding: .utf8) else { return }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count > 6 else { return }
        let fields = lines[6].split(separator: " ")
        guard fields.count == 2, let id = Int32(fields[1]) else { return }
        var info = shmid_ds()
        if shmctl(id, IPC_STAT, &info) == 0, info.shm_nattch == 0 { shmctl(id, IPC_RMID, nil) }
    }

    // MARK: Processes

    /// The direct children of `parent` (a postmaster's backends and workers).
    private func processes(of parent: Int32) -> [Int32] {
        Self.processTable().filter { $0.parent == parent }.map(\.pid)
    }

    /// Waits (at most 10 s) until none of `pids` is running (gone, or a zombie: it holds no
    /// shared memory nor port any more).
    private func awaitGone(_ pids: [Int32]) async {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if !pids.contains(where: Self.isRunning) { return }
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Every process: its pid and its parent's.
    private static func processTable() -> [(pid: Int32, parent: Int32)] {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        return entries.compactMap { entry in
            guard let pid = Int32(entry),
                  let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")")
            else { return nil }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 1, let parent = Int32(fields[1]) else { return nil }
            return (pid, parent)
        }
    }

    /// Stops servers left behind by an earlier test run that was killed (their postmaster's
    /// parent is gone, so it was reparented to init) and removes their directories: once per
    /// test process. SIGQUIT first (immediate shutdown: the postmaster ends its backends and
    /// removes its shared memory), SIGKILL for what has not ended 10 s later.
    package static let sweepOrphans: Void = {
        let table = processTable()
        let marked = Set(table.map(\.pid).filter { pid in
            guard let environment = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/environ")) else { return false }
            return environment.split(separator: 0).contains { String(decoding: $0, as: UTF8.self) == orphanMark }
        })
        let orphans = table.filter { marked.contains($0.pid) && $0.parent == 1 }.map(\.pid)
        guard !orphans.isEmpty else { return }
        var directories: [URL] = []
        for postmaster in orphans {
            let arguments = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(postmaster)/cmdline")))
                .map { $0.split(separator: 0).map { String(decoding: $0, as: UTF8.self) } } ?? []
            if let index = arguments.firstIndex(of: "-D"), index + 1 < arguments.count {
                let directory = URL(fileURLWithPath: arguments[index + 1]).deletingLastPathComponent()
                if directory.lastPathComponent.hasPrefix("imgw-postgres-") { directories.append(directory) }
            }
            kill(postmaster, SIGCONT)
            kill(postmaster, SIGQUIT)
        }
        let children = table.filter { orphans.contains($0.parent) && marked.contains($0.pid) }.map(\.pid)
        for _ in 0..<500 where (orphans + children).contains(where: isRunning) { usleep(20_000) }
        for pid in orphans + children where isRunning(pid) { kill(pid, SIGKILL) }
        for directory in directories { try? FileManager.default.removeItem(at: directory) }
    }()

    /// Whether `pid` runs (exists and is not a zombie).
    private static func isRunning(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else {
            return false
        }
        return stat[stat.index(after: close)...].split(separator: " ").first != "Z"
    }

    /// Runs a program to completion (no descriptor of ours reaches it) and returns its wait
    /// status with its output, lines joined by newlines.
    private static func runCapturing(_ executable: String, _ arguments: [String], in directory: URL? = nil) async throws -> (status: Int32, output: String) {
        let process = try ChildProcess(executable: executable, arguments: arguments, workingDirectory: directory?.path)
        var lines: [String] = []
        for await line in process.lines { lines.append(line) }
        return (await process.waitForExit(), lines.joined(separator: "\n"))
    }

    // MARK: Finding PostgreSQL

    /// The bin directory of the highest PostgreSQL version under /usr/lib/postgresql.
    package static func binDirectory() throws -> URL {
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [])
            .filter { FileManager.default.isExecutableFile(atPath: "\(root)/\($0)/bin/postgres") }
            .sorted { $0.compare($1, options: .numeric) == .orderedAscending }
        guard let highest = versions.last else {
            throw PostgresServerError("no PostgreSQL server under \(root)/*/bin (apt-get install postgresql; make test-deps does)")
        }
        return URL(fileURLWithPath: "\(root)/\(highest)/bin")
    }

    /// The temporary directory, or /tmp when running as root in one that the postgres user
    /// cannot reach (a TMPDIR under /root).
    private static func temporaryRoot() -> URL {
        let temporary = FileManager.default.temporaryDirectory
        guard geteuid() == 0 else { return temporary }
        var url = temporary.standardizedFileURL
        while url.path != "/" {
            var info = stat()
            if stat(url.path, &info) != 0 || info.st_mode & 0o001 == 0 { return URL(fileURLWithPath: "/tmp") }
            url.deleteLastPathComponent()
        }
        return temporary
    }
}

/// Why a ``PostgresServer`` could not start or do what it was asked.
package struct PostgresServerError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}
