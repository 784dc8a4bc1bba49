import ChildProcesses
import Foundation
import IMGateway

#if canImport(Glibc)
import Glibc
#endif

/// A mosquitto started for one run: configuration in the run's temporary directory, a free
/// loopback port, no persistence, `user root` when run as root (mosquitto would otherwise
/// switch to its own user), no connection limit.
final class BenchBroker: Sendable {
    /// Where it listens (127.0.0.1).
    let endpoint: HostPort
    /// The running broker.
    let process: ChildProcess
    /// What it printed last.
    let output: OutputTail

    /// The mosquitto executable.
    static let executable = "/usr/sbin/mosquitto"

    private init(endpoint: HostPort, process: ChildProcess, output: OutputTail) {
        self.endpoint = endpoint
        self.process = process
        self.output = output
    }

    /// The configuration for `port`: loopback only, anonymous, no persistence, queues large
    /// enough never to drop benchmark messages, unlimited connections, TCP_NODELAY.
    static func configuration(port: Int, extraLines: [String]) -> String {
        var lines = [
            "# Written by imbench for one run.",
            "per_listener_settings false",
            "allow_anonymous true",
            "persistence false",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages false",
            "max_queued_messages 100000",
            "set_tcp_nodelay true",
        ]
        if geteuid() == 0 { lines.append("user root") }
        lines += extraLines
        lines.append("listener \(port) 127.0.0.1")
        lines.append("max_connections -1")
        return lines.joined(separator: "\n") + "\n"
    }

    /// Starts mosquitto in `directory` and returns once it logged that it is running.
    /// Tries a few ports (one may be taken between choosing and binding), or only `port`
    /// (a broker started again where it was).
    static func start(in directory: URL, port fixedPort: Int? = nil, extraLines: [String] = [], echo: Bool) async throws -> BenchBroker {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw BenchError("\(executable) not found (apt-get install mosquitto), or pass --broker HOST:PORT")
        }
        var failures: [String] = []
        for _ in 0..<(fixedPort == nil ? 5 : 1) {
            let port = fixedPort ?? HostPort.freeLoopbackPort()
            let config = directory.appendingPathComponent("mosquitto-\(port).conf")
            try configuration(port: port, extraLines: extraLines).write(to: config, atomically: true, encoding: .utf8)
            let process = try ChildProcess(executable: executable, arguments: ["-c", config.path], parentDeathSignal: SIGTERM)
            ChildRegistry.shared.track(process)
            let output = OutputTail(prefix: "[mosquitto] ", echo: echo)
            if await output.follow(process, until: " running", within: 10), !process.hasExited {
                return BenchBroker(endpoint: HostPort(host: "127.0.0.1", port: port), process: process, output: output)
            }
            await ChildRegistry.stop(process, grace: 1)
            ChildRegistry.shared.forget(process)
            failures.append("port \(port): \(output.last(4))")
        }
        throw BenchError("mosquitto did not start: \(failures.joined(separator: "; "))")
    }

    /// SIGTERM (SIGKILL after 5 s) and wait.
    func stop() async {
        await ChildRegistry.stop(process, grace: 5)
        ChildRegistry.shared.forget(process)
    }
}
