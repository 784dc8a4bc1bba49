import ChildProcesses
import Foundation
import IMGateway

#if canImport(Glibc)
import Glibc
#endif

/// An `imgw` process started for one run: its configuration in the run's temporary
/// directory points at the broker, listens on a free loopback port, metrics and stats off.
final class BenchGateway: Sendable {
    /// Where devices connect.
    let endpoint: HostPort
    /// The running gateway.
    let process: ChildProcess
    /// What it printed last.
    let output: OutputTail
    /// Its WebSocket listener's port, when started with one.
    let webSocketPort: Int?
    /// The path of its WebSocket listener.
    static let webSocketPath = "/im"

    private init(endpoint: HostPort, process: ChildProcess, output: OutputTail, webSocketPort: Int? = nil) {
        self.endpoint = endpoint
        self.process = process
        self.output = output
        self.webSocketPort = webSocketPort
    }

    /// The `imgw` binary next to this executable (`swift build --product imgw` puts both in
    /// the same directory).
    static func defaultExecutable() -> String {
        let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        return me.deletingLastPathComponent().appendingPathComponent("imgw").path
    }

    /// The configuration: broker, listener, secret; metrics, stats and info logs off
    /// (the benchmark should measure the gateway's work, not its logging); no chat rate limit
    /// (a benchmark device sends far more than a person) and no connection limits (all its
    /// devices come from one address);
    /// `extraLines` are appended as they are (YAML).
    static func configuration(
        broker: BrokerAddress, listen: Int, webSocket: Int? = nil, secret: String, gatewayID: String = "imbench", extraLines: [String]
    ) -> String {
        ([
            "# Written by imbench for one run.",
            "gateway_id: \(gatewayID)",
            "listen:",
            "  host: 127.0.0.1",
            "  port: \(listen)",
        ] + (webSocket.map { ["  websocket: {enabled: true, host: 127.0.0.1, port: \($0), path: \(webSocketPath)}"] } ?? []) + [
            "broker:",
            "  url: mqtt://\(broker.host):\(broker.port)",
        ] + (broker.username.map { ["  username: \(yaml($0))", "  password: \(yaml(broker.password ?? ""))"] } ?? []) + [
            "auth:",
            "  jwt_secret: \(secret)",
            "metrics:",
            "  enabled: false",
            "stats_interval: 0",
            "log_level: notice",
            "limits:",
            "  chat_rate: 0",
            // Every benchmark device connects from 127.0.0.1.
            "  max_connections_per_address: 0",
            "  max_connections_awaiting_login: 0",
        ] + extraLines).joined(separator: "\n") + "\n"
    }

    /// `text` as a single-quoted YAML string.
    private static func yaml(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
    }

    /// Starts imgw and returns once its listener accepts connections: on a free port, or on
    /// `port` (a gateway started again where it was); what it prints also goes to `logFile`.
    static func start(
        executable: String, broker: BrokerAddress, secret: String, in directory: URL, port fixedPort: Int? = nil,
        gatewayID: String = "imbench", webSocket: Bool = false, extraLines: [String] = [], echo: Bool, logFile: URL? = nil
    ) async throws -> BenchGateway {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw BenchError(
                "imgw not found at \(executable): build it into the same scratch path "
                    + "(swift build -c release --product imgw) or pass --imgw PATH")
        }
        let port = fixedPort ?? HostPort.freeLoopbackPort()
        // The message archive in the run's directory, unless the run configures another.
        var extraLines = extraLines
        if !extraLines.contains(where: { $0.hasPrefix("archive:") }) {
            extraLines.append("archive: {path: \(yaml(directory.appendingPathComponent("archive-\(port).sqlite").path))}")
        }
        let webSocketPort = webSocket ? HostPort.freeLoopbackPort() : nil
        let text = configuration(broker: broker, listen: port, webSocket: webSocketPort, secret: secret, gatewayID: gatewayID, extraLines: extraLines)
        do {
            try GatewayConfiguration.parse(yaml: text).validateForGateway()
        } catch {
            throw BenchError("the imgw configuration imbench wrote is invalid: \(error)")
        }
        let config = directory.appendingPathComponent("imgw-\(port).yaml")
        try text.write(to: config, atomically: true, encoding: .utf8)
        let process = try ChildProcess(executable: executable, arguments: ["serve", "--config", config.path], parentDeathSignal: SIGTERM)
        ChildRegistry.shared.track(process)
        let output = OutputTail(prefix: "[imgw] ", echo: echo, logFile: logFile)
        _ = await output.follow(process, until: nil, within: 0)
        let endpoint = HostPort(host: "127.0.0.1", port: port)
        let deadline = MonotonicClock.nanoseconds() + 20_000_000_000
        while MonotonicClock.nanoseconds() < deadline {
            if process.hasExited { break }
            if endpoint.acceptsConnections(), webSocketPort.map({ HostPort(host: "127.0.0.1", port: $0).acceptsConnections() }) ?? true {
                return BenchGateway(endpoint: endpoint, process: process, output: output, webSocketPort: webSocketPort)
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        await ChildRegistry.stop(process, grace: 1)
        ChildRegistry.shared.forget(process)
        try? await Task.sleep(for: .milliseconds(100))
        throw BenchError("imgw did not start (\(executable) serve --config \(config.path)): \(output.last())")
    }

    /// SIGTERM (graceful: devices are told, sessions end with their wills), SIGKILL after
    /// `grace` seconds.
    func stop(grace: Double = 10) async {
        await ChildRegistry.stop(process, grace: grace)
        ChildRegistry.shared.forget(process)
    }
}
