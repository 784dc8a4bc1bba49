import ChildProcesses
import Foundation
import IMGateway
import IMWire
import Logging
import Mosquitto
import NIOCore
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The imgw executable built next to this test bundle, on a free port, against `broker`.
package final class IMGWProcess: Sendable {
    package static let secret = "process-test-secret-0123456789abcdef"
    package let port: Int
    /// Its Prometheus endpoint.
    package let metricsPort: Int
    /// Its server API (served when started with `api: true`).
    package let apiPort: Int
    package let process: ChildProcess
    package let output: LogBuffer

    package static var executable: String {
        // .build/<triple>/debug/IMGatewayPackageTests.xctest -> .build/<triple>/debug/imgw
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        return bundle.deletingLastPathComponent().appendingPathComponent("imgw").path
    }

    /// The offline-push webhook's secret in `start(..., push: URL)`.
    package static let pushSecret = "push-test-secret-0123456789abcdef0123456789"

    /// The server API's key in `start(..., api: true)`.
    package static let apiKey = "api-test-key-0123456789abcdef0123456789"

    /// Where a test gateway keeps its archive.
    package enum Archive: Sendable {
        /// A SQLite file of its own in the broker's directory (named after its port, so that a
        /// gateway restarted on the same port finds it again).
        case sqlite
        /// A SQLite file at this path.
        case sqliteFile(String)
        /// A PostgreSQL database.
        case postgres(String)
        /// None.
        case none
    }

    package static func start(
        broker: some BrokerUnderTest, port: Int? = nil, keepalive: Int = 30, brokerLines: [String] = [], api: Bool = false,
        push: String? = nil, gatewayID: String? = nil, lines: [String] = [], archive: Archive = .sqlite, until marker: String = "listening"
    ) async throws -> IMGWProcess {
        // Returns once imgw listens and has printed `marker`.
        let port = port ?? freePort()
        let metricsPort = freePort()
        let apiPort = freePort()
        let config = broker.directory.appendingPathComponent("imgw-\(port).yaml")
        // Each its own gateway_id (as in production) unless the test says otherwise.
        try """
            gateway_id: \(gatewayID ?? "gw-\(port)")
            \(lines.joined(separator: "\n"))
            auth:
              jwt_secret: \(secret)
            broker:
              keepalive: \(keepalive)
            \((broker.gatewayLines + brokerLines).map { "  " + $0 }.joined(separator: "\n"))
            metrics:
              port: \(metricsPort)
            api:
              port: \(apiPort)
              keys: [\(api ? "{name: backend, key: \(apiKey)}" : "")]
            \(push.map { "push: {url: '\($0)', secret: \(pushSecret)}" } ?? "")
            \(archiveLines(archive, directory: broker.directory, port: port))
            log_level: info
            """.write(to: config, atomically: true, encoding: .utf8)
        let process = try spawn(
            executable,
            ["serve", "--config", config.path, "--broker", "mqtt://127.0.0.1:\(broker.port)", "--listen", "127.0.0.1:\(port)"])
        let output = LogBuffer()
        // "listening" first; another marker may come before or after it.
        guard await awaitOutput(of: process, containing: "listening", into: output), await output.waitFor(marker) else {
            process.signal(SIGKILL)
            throw TestError("imgw did not start: \(output.text.withLock { $0 })")
        }
        let gateway = IMGWProcess(port: port, metricsPort: metricsPort, apiPort: apiPort, process: process, output: output)
        TestResources.track { _ = await gateway.stop(within: .seconds(10)) }
        return gateway
    }

    /// The `archive:` section for `archive`.
    package static func archiveLines(_ archive: Archive, directory: URL, port: Int) -> String {
        switch archive {
        case .sqlite: "archive: {path: '\(directory.appendingPathComponent("archive-\(port).sqlite").path)'}"
        case .sqliteFile(let path): "archive: {path: '\(path)'}"
        case .postgres(let url): "archive: {url: '\(url)'}"
        case .none: "archive: {store: none}"
        }
    }

    private init(port: Int, metricsPort: Int, apiPort: Int, process: ChildProcess, output: LogBuffer) {
        self.port = port
        self.metricsPort = metricsPort
        self.apiPort = apiPort
        self.process = process
        self.output = output
    }

    /// A device connected to this gateway and logged in as `user`.
    package func device(_ user: String, device: String = "phone") async throws -> TestDevice {
        try await login(user, device: device).device
    }

    /// A device of `user` logged in, and its LOGIN_OK.
    package func login(_ user: String, device: String = "phone") async throws -> (device: TestDevice, ok: LoginOK) {
        let connection = try await TestDevice.connect(port: port)
        let ok = try await connection.login(token: try await TokenMinter(secret: Self.secret).mint(user: user), device: device)
        return (connection, ok)
    }

    /// A gauge or counter from its /metrics (`imgw_connections`, ...).
    package func metric(_ name: String) async throws -> Double {
        try await scrapeMetric(name, port: metricsPort)
    }

    /// SIGTERM; returns how long imgw took to exit, or nil if it was still running after
    /// `limit` (then it is killed).
    package func stop(within limit: Duration) async -> Duration? {
        let started = ContinuousClock.now
        process.signal(SIGTERM)
        let exited = await withTaskGroup(of: Bool.self) { group in
            group.addTask { await self.process.waitForExit(); return true }
            group.addTask { try? await Task.sleep(for: limit); return false }
            let first = await group.next() ?? false
            let exitedAt = ContinuousClock.now
            group.cancelAll()
            if !first { self.process.signal(SIGKILL) }
            await group.waitForAll()
            return first ? exitedAt : nil
        }
        return exited.map { $0 - started }
    }

    package func kill9() async {
        await process.end(SIGKILL)
    }

    package func stop() async {
        await process.end(SIGTERM)
    }

    deinit {
        process.signal(SIGKILL)
    }
}

/// The value of the metric `name` (without labels) on the /metrics of the gateway whose
/// metrics listen on `port`.
package func scrapeMetric(_ name: String, port: Int) async throws -> Double {
    let text = try await run("/usr/bin/curl", ["-sS", "http://127.0.0.1:\(port)/metrics"])
    // The sum of its series (those with a `transport` label are one per transport).
    let values = text.split(separator: "\n")
        .filter { $0.hasPrefix(name + " ") || $0.hasPrefix(name + "{") }
        .compactMap { Double($0.split(separator: " ").last ?? "") }
    guard !values.isEmpty else { throw TestError("no \(name) in /metrics: \(text)") }
    return values.reduce(0, +)
}
