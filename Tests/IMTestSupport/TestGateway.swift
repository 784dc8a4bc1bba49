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

/// A gateway server in this process, on a free port, against its own broker.
///
/// `stop()` ends it completely: sessions, connections, the server's helper tasks (nothing
/// it started logs afterwards), then the broker. A test that throws before calling it
/// leaves that to `deinit`, which starts the same shutdown without waiting.
package final class TestGateway: Sendable {
    package let broker: any BrokerUnderTest
    package let server: GatewayServer
    package let minter: TokenMinter
    package let task: Task<Void, any Error>
    package static let secret = "test-secret-\(UInt32.random(in: 0...UInt32.max))"

    package var port: Int { server.localAddress.port! }

    private init(broker: any BrokerUnderTest, server: GatewayServer, minter: TokenMinter, task: Task<Void, any Error>) {
        self.broker = broker
        self.server = server
        self.minter = minter
        self.task = task
    }

    /// A gateway in this process on a broker of `kind` started for the test.
    package static func start(on kind: BrokerKind = .mosquitto, _ configure: (inout GatewayConfiguration) -> Void = { _ in }) async throws -> TestGateway {
        let broker = try await kind.start()
        var configuration = GatewayConfiguration.defaults
        configuration.listen.host = "127.0.0.1"
        configuration.listen.port = 0
        configuration.auth.jwtSecret = secret
        configuration.broker.keepalive = 10
        configuration.metrics.port = 0
        // Each gateway its own archive, in the test's directory.
        configuration.archive.path = broker.directory.appendingPathComponent("archive-\(UInt64.random(in: 0...UInt64.max)).sqlite").path
        configure(&configuration)
        var logger = Logger(label: "imgw-test")
        logger.logLevel = ProcessInfo.processInfo.environment["IMGW_TEST_LOG"].flatMap { Logger.Level(rawValue: $0) } ?? .warning
        let server = try await GatewayServer.bind(
            configuration: configuration,
            broker: BrokerEndpoint(host: "127.0.0.1", port: broker.port, username: broker.credentials?.username, password: broker.credentials?.password),
            logger: logger)
        let task = runGateway(server, logger: logger)
        let gateway = TestGateway(broker: broker, server: server, minter: TokenMinter(secret: secret), task: task)
        TestResources.track { await gateway.stop() }
        return gateway
    }

    /// A device connected and logged in as `user`.
    package func device(_ user: String, device: String) async throws -> TestDevice {
        let connection = try await TestDevice.connect(port: port)
        try await connection.login(token: try await minter.mint(user: user), device: device)
        return connection
    }

    /// The value of the metric `name` (without labels) on its /metrics.
    package func metric(_ name: String) async throws -> Double {
        try await scrapeMetric(name, port: try #require(await server.metrics?.localAddress().port))
    }

    /// Shuts the server down (as on SIGTERM), waits until it has ended, stops the broker.
    package func stop() async {
        server.shutdown()
        _ = try? await task.value
        await broker.stop()
    }

    deinit {
        server.shutdown()
    }
}
