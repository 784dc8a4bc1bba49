import ChildProcesses
import AsyncToolkit
import Foundation
import IMGateway
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A real ejabberd node (Debian's ejabberd 23.01, mod_mqtt) started for one test: its own
/// configuration, Mnesia spool and logs in a temporary directory, MQTT on a free loopback port,
/// an Erlang node name of its own, and an account for the gateway.
///
/// The node runs `erl` directly (not `ejabberdctl`, which insists on root or the ejabberd
/// user), as the test's own user, against an `epmd` the test starts on a free port
/// (``TestEpmd``), so that nothing outlives the test; `ejabberdctl` commands go through
/// `ejabberd_ctl` from a hidden node (``ctl(_:)``).
package final class TestEjabberd: Sendable {
    /// The MQTT listener (127.0.0.1).
    package let port: Int
    package let directory: URL
    /// The Erlang node, e.g. `ejab-1a2b3c@localhost`.
    package let node: String
    package let epmd: TestEpmd
    package let cookie: String
    package let process: ChildProcess
    private let log: LogBuffer

    /// The gateway's account (`broker.username` / `broker.password`).
    package static let username = "imgw"
    package static let password = "imgw-test-password-0123456789"

    /// Where Debian installs the node's code (ejabberdctl's ERL_LIBS).
    private static let libraries = "/usr/lib/\(machineTriple)"
    private static var machineTriple: String {
        (try? String(contentsOfFile: "/usr/sbin/ejabberdctl", encoding: .utf8))?
            .split(separator: "\n").first { $0.hasPrefix("ERL_LIBS=") }
            .map { $0.dropFirst("ERL_LIBS=".count).trimmingCharacters(in: CharacterSet(charactersIn: "'\"")) }
            .map { URL(fileURLWithPath: $0).lastPathComponent } ?? "x86_64-linux-gnu"
    }

    /// What `mod_mqtt` is configured with.
    package struct Options: Sendable {
        /// Seconds a disconnected session lives (ejabberd's default is 300).
        package var sessionExpiry = 604_800
        /// Messages queued per session; nil: ejabberd's default (5000).
        package var maxQueue: Int?
        package init() {}
    }

    /// Starts a node (with its own epmd unless given one: the nodes of a cluster share it)
    /// and returns once it accepts MQTT connections and the gateway's account exists.
    package static func start(_ options: Options = Options(), epmd: TestEpmd? = nil, cookie: String? = nil) async throws -> TestEjabberd {
        // A node's start takes about a second of CPU; dozens of tests starting theirs at once
        // would starve everything else on the machine (timing tests failed that way).
        _ = sweepOrphans
        return try await starting.run { try await launch(options, epmd: epmd, cookie: cookie) }
    }

    /// One node starts at a time, in this test process.
    private static let starting = AsyncSemaphore(limit: 1)

    /// In the environment of every Erlang process and epmd the tests start: what
    /// ``sweepOrphans`` looks for.
    package static let orphanMark = "IMGW_TEST_EJABBERD=1"

    /// Kills nodes and epmds left behind by an earlier test run that was killed (their
    /// parent is gone, so they were reparented to init): once per test process.
    package static let sweepOrphans: Void = {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return }
        for entry in entries {
            guard let pid = Int32(entry),
                  let environment = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(entry)/environ")),
                  environment.split(separator: 0).contains(where: { String(decoding: $0, as: UTF8.self) == orphanMark }),
                  let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, fields[1] == "1" { kill(pid, SIGKILL) }
        }
    }()

    private static func launch(_ options: Options, epmd: TestEpmd?, cookie: String?) async throws -> TestEjabberd {
        let epmd = if let epmd { epmd } else { try await TestEpmd.start() }
        let id = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-ejabberd-\(id)")
        for sub in ["spool", "logs"] {
            try FileManager.default.createDirectory(at: directory.appendingPathComponent(sub), withIntermediateDirectories: true)
        }
        let port = freePort()
        let node = "ejab-\(id)@localhost"
        let cookie = cookie ?? "imgw-test-\(UInt64.random(in: 0...UInt64.max))"
        var modules = ["  mod_mqtt:", "    session_expiry: \(options.sessionExpiry)"]
        if let maxQueue = options.maxQueue { modules.append("    max_queue: \(maxQueue)") }
        let config = directory.appendingPathComponent("ejabberd.yml")
        try ([
            "loglevel: info",
            "hosts:",
            "  - localhost",
            "listen:",
            "  -",
            "    port: \(port)",
            "    ip: \"127.0.0.1\"",
            "    module: mod_mqtt",
            "    backlog: 1000",
            "auth_method: internal",
            "acl:",
            "  local:",
            "    user_regexp: \"\"",
            "access_rules:",
            "  local:",
            "    allow: local",
            "modules:",
        ] + modules).joined(separator: "\n").appending("\n").write(to: config, atomically: true, encoding: .utf8)
        let process = try spawn(
            "/usr/bin/env",
            environment(epmd: epmd, directory: directory) + [
                "EJABBERD_CONFIG_PATH=\(config.path)",
                "EJABBERD_LOG_PATH=\(directory.path)/logs/ejabberd.log",
                // One scheduler that sleeps when idle (the VM's default spins, and several test
                // nodes at once would starve the test process of its 2 cores).
                "/usr/bin/erl", "+S", "1:1", "+SDcpu", "1:1", "+sbwt", "none", "+sbwtdcpu", "none", "+sbwtdio", "none",
                "-sname", node, "-setcookie", cookie, "-noinput",
                "-kernel", "inet_dist_use_interface", "{127,0,0,1}",
                "-mnesia", "dir", "\"\(directory.path)/spool\"",
                "-s", "ejabberd",
            ])
        let log = LogBuffer()
        guard await awaitOutput(of: process, containing: listening(port), into: log, within: 60),
              !process.hasExited
        else {
            await process.end(SIGKILL)
            throw TestError("ejabberd did not start on port \(port): \(log.text.withLock { $0 })")
        }
        let ejabberd = TestEjabberd(port: port, directory: directory, node: node, epmd: epmd, cookie: cookie, process: process, log: log)
        TestResources.track { await ejabberd.stop() }
        try await ejabberd.ctl(["register", username, "localhost", password])
        return ejabberd
    }

    private init(port: Int, directory: URL, node: String, epmd: TestEpmd, cookie: String, process: ChildProcess, log: LogBuffer) {
        self.port = port
        self.directory = directory
        self.node = node
        self.epmd = epmd
        self.cookie = cookie
        self.process = process
        self.log = log
    }

    /// `/usr/bin/env` arguments every Erlang process of the test gets: the node's code, the
    /// test's epmd, loopback only.
    private static func environment(epmd: TestEpmd, directory: URL) -> [String] {
        [
            orphanMark,
            "HOME=\(directory.path)",
            "ERL_LIBS=\(libraries)",
            "ERL_INETRC=/etc/ejabberd/inetrc",
            "ERL_EPMD_ADDRESS=127.0.0.1",
            "ERL_EPMD_PORT=\(epmd.port)",
            "ERL_CRASH_DUMP=\(directory.path)/logs/erl_crash.dump",
        ]
    }

    /// An `ejabberdctl` command (`register imgw localhost PASSWORD`, `join_cluster NODE`...),
    /// run against this node from a hidden one; returns what it printed, throws if it failed.
    @discardableResult
    package func ctl(_ command: [String]) async throws -> String {
        let name = "ctl-\(UInt32.random(in: 0...UInt32.max))@localhost"
        let process = try spawn(
            "/usr/bin/env",
            Self.environment(epmd: epmd, directory: directory) + [
                "/usr/bin/erl", "+S", "1:1", "+sbwt", "none", "-sname", name, "-setcookie", cookie, "-noinput", "-hidden",
                "-kernel", "inet_dist_use_interface", "{127,0,0,1}",
                "-s", "ejabberd_ctl", "-extra", node,
            ] + command)
        // A command that cannot reach the node must not hold the test (nor the start gate).
        let limit = Task {
            try await Task.sleep(for: .seconds(30))
            process.signal(SIGKILL)
        }
        var lines: [String] = []
        for await line in process.lines { lines.append(line) }
        let status = await process.waitForExit()
        limit.cancel()
        let output = lines.joined(separator: "\n")
        guard status == 0 else { throw TestError("ejabberdctl \(command.joined(separator: " ")) failed (\(status)): \(output)") }
        return output
    }

    /// Starts `count` nodes sharing an epmd and a cookie and joins them in one cluster (the
    /// first node's); the gateway's account is cluster-wide.
    package static func cluster(_ count: Int = 2, _ options: Options = Options()) async throws -> [TestEjabberd] {
        let first = try await start(options)
        var nodes = [first]
        for _ in 1..<count {
            let node = try await start(options, epmd: first.epmd, cookie: first.cookie)
            try await node.join(first)
            nodes.append(node)
        }
        return nodes
    }

    /// Joins `other`'s cluster (`ejabberdctl join_cluster`): ejabberd restarts on this node
    /// with the cluster's tables; returns once its MQTT listener accepts again.
    package func join(_ other: TestEjabberd) async throws {
        let mark = log.length
        try await ctl(["join_cluster", other.node])
        guard await log.waitFor(Self.listening(port), since: mark, within: 60) else {
            throw TestError("ejabberd \(node) did not come back after joining \(other.node): \(output)")
        }
        let members = try await ctl(["list_cluster"])
        guard members.contains(other.node), members.contains(node) else {
            throw TestError("\(node) is not in \(other.node)'s cluster: \(members)")
        }
    }

    /// The line a node prints when its MQTT listener accepts connections.
    private static func listening(_ port: Int) -> String {
        "Start accepting TCP connections at 127.0.0.1:\(port) for mod_mqtt"
    }

    /// What the node printed so far.
    package var output: String { log.text.withLock { $0 } }

    /// Stops the node (SIGTERM: Erlang's orderly stop), SIGKILL if it has not ended after
    /// 15 s; the directory is removed.
    package func stop() async {
        process.signal(SIGTERM)
        let timer = Task {
            try await Task.sleep(for: .seconds(15))
            process.signal(SIGKILL)
        }
        _ = await process.waitForExit()
        timer.cancel()
        try? FileManager.default.removeItem(at: directory)
    }

    /// SIGKILL: the node dies as a crashed machine would.
    package func kill9() async {
        await process.end(SIGKILL)
    }
}

/// An Erlang port mapper of the test's own on a free loopback port, in the foreground (not
/// the daemon a first `erl` would leave behind), stopped with the test.
package final class TestEpmd: Sendable {
    package let port: Int
    package let process: ChildProcess

    package static func start() async throws -> TestEpmd {
        let port = freePort()
        // -d: it says when it listens ("epmd running").
        let process = try spawn("/usr/bin/env", [TestEjabberd.orphanMark, "/usr/bin/epmd", "-d", "-port", "\(port)", "-address", "127.0.0.1"])
        let log = LogBuffer()
        guard await awaitOutput(of: process, containing: "epmd running", into: log, within: 10), !process.hasExited else {
            await process.end(SIGKILL)
            throw TestError("epmd did not start on port \(port): \(log.text.withLock { $0 })")
        }
        let epmd = TestEpmd(port: port, process: process)
        TestResources.track { await epmd.process.end(SIGTERM) }
        return epmd
    }

    private init(port: Int, process: ChildProcess) {
        self.port = port
        self.process = process
    }
}

package extension Trait where Self == TimeLimitTrait {
    /// The time limit of a test that starts ejabberd nodes. Nodes start one at a time in the
    /// test process (``TestEjabberd/start(_:epmd:cookie:)``) and every test of the suite begins
    /// at once, so a test's time counts its turn in that queue: a few dozen node starts on a
    /// busy machine, before the test does anything of its own. The limit is there to stop a
    /// test that hangs (make test's watchdog stops a whole run that does).
    package static var startsEjabberdNodes: Self { .timeLimit(.minutes(5)) }
}
