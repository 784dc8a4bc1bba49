import ChildProcesses
import Foundation
import IMGateway
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A broker imgw runs against in a test: mosquitto (``TestBroker``) or ejabberd (``TestEjabberd``).
package protocol BrokerUnderTest: Sendable {
    /// Its MQTT port on 127.0.0.1.
    var port: Int { get }
    /// A directory of the test's own (configuration files go there).
    var directory: URL { get }
    /// The account every client uses; nil: anonymous.
    var credentials: (username: String, password: String)? { get }
    /// Its process id.
    var pid: Int32 { get }
    /// Stops it and waits until it has.
    func stop() async
}

package extension BrokerUnderTest {
    /// What imgw's `broker:` section needs besides the URL.
    package var gatewayLines: [String] { credentials.map { ["username: \($0.username)", "password: \($0.password)"] } ?? [] }
}

extension TestBroker: BrokerUnderTest {
    package var credentials: (username: String, password: String)? { nil }
}

extension TestEjabberd: BrokerUnderTest {
    package var credentials: (username: String, password: String)? { (Self.username, Self.password) }
    package var pid: Int32 { process.pid }
}

/// The brokers the gateway's integration tests run on (as a test argument).
package enum BrokerKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case mosquitto, ejabberd

    package var testDescription: String { rawValue }

    /// A broker of this kind, started for the running test.
    package func start() async throws -> any BrokerUnderTest {
        switch self {
        case .mosquitto: try await TestBroker.start()
        case .ejabberd: try await TestEjabberd.start()
        }
    }
}

/// A real mosquitto broker started for one test on a free loopback port, with its own
/// directory (config, password file, certificates, persistence).
package final class TestBroker: Sendable {
    package let port: Int
    package let directory: URL
    package let process: ChildProcess
    private let log: LogBuffer

    package struct Options: Sendable {
        /// Extra mosquitto.conf lines for the listener (after `listener PORT 127.0.0.1`).
        package var listenerLines: [String] = []
        /// Extra global lines.
        package var globalLines: [String] = []
        /// Users for a password file; anonymous access is refused when set.
        package var users: [String: String] = [:]
        /// Keep the broker's persistence in `directory` (survives a restart with the
        /// same options and directory).
        package var persistence = false
        package init() {}
    }

    /// Starts mosquitto and returns once it logged that it is running.
    package static func start(_ options: Options = Options(), directory: URL? = nil, port: Int? = nil) async throws -> TestBroker {
        _ = sweepOrphans
        let directory = directory ?? FileManager.default.temporaryDirectory
            .appendingPathComponent("imgw-broker-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var lastError: (any Error)?
        for _ in 0..<5 {
            let port = port ?? freePort()
            do {
                return try await launch(options, directory: directory, port: port)
            } catch {
                lastError = error
            }
        }
        throw lastError!
    }

    private static func launch(_ options: Options, directory: URL, port: Int) async throws -> TestBroker {
        var lines = [
            "per_listener_settings false",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages true",
            "max_queued_messages 100000",
            "persistence \(options.persistence)",
        ]
        if geteuid() == 0 {
            // As root, mosquitto switches to the "mosquitto" user, which cannot read the
            // test's 0600 keys and directories (CI runs as root).
            lines.append("user root")
        }
        if options.persistence {
            lines.append("persistence_location \(directory.path)/")
        }
        if options.users.isEmpty {
            lines.append("allow_anonymous true")
        } else {
            let passwordFile = directory.appendingPathComponent("passwords")
            try "".write(to: passwordFile, atomically: true, encoding: .utf8)
            for (user, password) in options.users.sorted(by: { $0.key < $1.key }) {
                try await run("/usr/bin/mosquitto_passwd", ["-b", passwordFile.path, user, password])
            }
            lines.append("allow_anonymous false")
            lines.append("password_file \(passwordFile.path)")
        }
        lines += options.globalLines
        lines.append("listener \(port) 127.0.0.1")
        lines += options.listenerLines
        let config = directory.appendingPathComponent("mosquitto.conf")
        try (lines.joined(separator: "\n") + "\n").write(to: config, atomically: true, encoding: .utf8)

        // ChildProcess, not Foundation's Process: the child gets a clean signal mask, so
        // SIGTERM stops it (mosquitto then saves its persistence).
        let process = try spawn("/usr/sbin/mosquitto", ["-c", config.path])
        let log = LogBuffer()
        let started = await awaitOutput(of: process, containing: " running", into: log)
        guard started, !process.hasExited else {
            process.signal(SIGKILL)
            throw TestError("mosquitto did not start on port \(port): \(log.text.withLock { $0 })")
        }
        let broker = TestBroker(port: port, directory: directory, process: process, log: log)
        TestResources.track { await broker.kill9() }
        return broker
    }

    private init(port: Int, directory: URL, process: ChildProcess, log: LogBuffer) {
        self.port = port
        self.directory = directory
        self.process = process
        self.log = log
    }

    /// What the broker logged so far.
    package var output: String { log.text.withLock { $0 } }

    package var pid: Int32 { process.pid }

    /// SIGTERM and wait for the exit (mosquitto saves persistence on a clean exit).
    package func stop() async {
        await process.end(SIGTERM)
    }

    /// SIGKILL and wait for the exit.
    package func kill9() async {
        await process.end(SIGKILL)
    }

    deinit {
        // No waiting here: Foundation's waitUntilExit can deadlock off the main thread.
        process.signal(SIGKILL)
        try? FileManager.default.removeItem(at: directory)
    }

    /// Kills brokers left behind by an earlier test run that was killed (their parent is
    /// gone, so they were reparented to init).
    package static let sweepOrphans: Void = {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return }
        for entry in entries {
            guard let pid = Int32(entry),
                  let cmdline = try? String(contentsOfFile: "/proc/\(entry)/cmdline", encoding: .utf8),
                  cmdline.contains("imgw-broker-"), cmdline.hasPrefix("/usr/sbin/mosquitto"),
                  let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, fields[1] == "1" { kill(pid, SIGKILL) }
        }
    }()
}

package struct TestError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

/// Ports handed out in this process: never handed out twice, so a test that restarts a
/// server on its port cannot find another test's server there.
private let handedOutPorts = Mutex<Set<Int>>([])

/// Where ports are handed out from: below the kernel's ephemeral range
/// (/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default), so that no outgoing
/// connection (the scale test opens thousands) takes a port between the moment it is
/// handed out and the moment a server binds it.
private let portRange = 20_000..<32_768

/// A TCP port on 127.0.0.1 that is free now and was not handed out before in this process.
package func freePort() -> Int {
    while true {
        let port = Int.random(in: portRange)
        guard handedOutPorts.withLock({ !$0.contains(port) }), isFree(port) else { continue }
        if handedOutPorts.withLock({ $0.insert(port).inserted }) { return port }
    }
}

/// Whether a listening socket can bind 127.0.0.1:`port` now.
private func isFree(_ port: Int) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = UInt16(port).bigEndian
    let length = socklen_t(MemoryLayout<sockaddr_in>.size)
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
    } == 0
}

/// Runs a program to completion (through `ChildProcess`: no descriptor of the test process
/// reaches it) and returns its output, lines joined by newlines (none after the last);
/// throws with the output if it fails.
@discardableResult
package func run(_ executable: String, _ arguments: [String], in directory: URL? = nil) async throws -> String {
    let (status, output) = try await runCapturing(executable, arguments, in: directory)
    guard status == 0 else {
        throw TestError("\(executable) \(arguments.joined(separator: " ")) failed (wait status \(status)): \(output)")
    }
    return output
}

/// Runs a program to completion like `run`, and returns its wait status with its output
/// whatever the status.
package func runCapturing(_ executable: String, _ arguments: [String], in directory: URL? = nil) async throws -> (status: Int32, output: String) {
    let process = try spawn(executable, arguments, in: directory)
    var lines: [String] = []
    for await line in process.lines { lines.append(line) }
    return (await process.waitForExit(), lines.joined(separator: "\n"))
}

package extension ChildProcess {
    /// Sends `signal` and waits for the exit (at once if it has exited).
    package func end(_ signal: Int32) async {
        self.signal(signal)
        await waitForExit()
    }
}

/// Starts a child process (see `ChildProcess`) that the running test kills, if it is
/// still running, when the test ends.
package func spawn(_ executable: String, _ arguments: [String], in directory: URL? = nil) throws -> ChildProcess {
    let process = try ChildProcess(executable: executable, arguments: arguments, workingDirectory: directory?.path)
    TestResources.track { await process.end(SIGKILL) }
    return process
}

/// Collects what `process` prints into `log` (for as long as it runs) and waits, at most
/// `seconds`, for a line containing `marker`. False if the process ended or time ran out.
package func awaitOutput(of process: ChildProcess, containing marker: String, into log: LogBuffer, within seconds: Double = 15) async -> Bool {
    await process.follow(until: marker, within: .seconds(seconds)) { line in log.append(line) }
}

/// Output collected from a child process.
package final class LogBuffer: Sendable {
    package let text = Mutex("")
    /// Who waits for a marker, by a number of their own.
    private let waiters = Mutex<[Int: (marker: String, waiter: CheckedContinuation<Bool, Never>)]>([:])
    private let nextWaiter = Mutex(0)

    package init() {}

    /// Adds a line, and wakes whoever waits for a marker in it.
    package func append(_ line: String) {
        text.withLock { $0 += line + "\n" }
        let woken = waiters.withLock { waiters in
            let matched = waiters.filter { line.contains($0.value.marker) }
            for key in matched.keys { waiters[key] = nil }
            return matched.values.map(\.waiter)
        }
        for waiter in woken { waiter.resume(returning: true) }
    }

    /// How much text came so far (UTF-8 bytes): a mark for ``waitFor(_:since:within:)``.
    package var length: Int { text.withLock { $0.utf8.count } }

    /// Whether a line containing `marker` came after `mark` (see ``length``), or comes within
    /// `seconds`.
    package func waitFor(_ marker: String, since mark: Int = 0, within seconds: Double = 15) async -> Bool {
        let id = nextWaiter.withLock { $0 += 1; return $0 }
        let timer = Task {
            try await Task.sleep(for: .seconds(seconds))
            self.expire(id)
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { waiter in
            // Registered under the text's lock, so that no line is added in between.
            let present = text.withLock { text in
                if String(decoding: text.utf8.dropFirst(mark), as: UTF8.self).contains(marker) { return true }
                waiters.withLock { $0[id] = (marker, waiter) }
                return false
            }
            if present { waiter.resume(returning: true) }
        }
    }

    private func expire(_ id: Int) {
        waiters.withLock { $0.removeValue(forKey: id) }?.waiter.resume(returning: false)
    }
}
