import FaultProxy
import Foundation
import IMGateway
import LocalPostgres

#if canImport(Glibc)
import Glibc
#endif

/// The chaos run's cluster on this machine, each part a real process: PostgreSQL (the
/// gateways' shared archive), mosquitto configured like imgw's embedded broker (persistence,
/// autosave every 60 s, 10,000 queued messages per session), N imgw, a ``FaultProxy`` between
/// each gateway and the broker, and one per device in front of the gateways (a load balancer:
/// each connection to a gateway drawn at random, the next one if it refuses).
///
/// The nemesis acts through it: every fault has its undo (started again on the same port and
/// data, continued, passing again). One call at a time per part: a part that is down is not
/// killed again, a part that is stopped is not stopped again.
actor ChaosCluster {
    struct Settings: Sendable {
        var gateways: Int
        var imgw: String
        var secret: String
        var apiKey: String
        var verbose: Bool
    }

    let settings: Settings
    let directory: URL
    let postgres: PostgresServer
    let brokerPort: Int
    private var broker: BenchBroker?
    private var brokerPaused = false
    /// Between gateway N and the broker.
    let brokerLinks: [FaultProxy]
    let gatewayPorts: [Int]
    let apiPorts: [Int]
    private var gateways: [BenchGateway?]
    private var gatewayPaused: [Bool]
    private var databaseDown = false
    private var databasePaused = false
    /// In front of the gateways, one per device.
    private(set) var deviceLinks: [FaultProxy] = []
    /// Told when a gateway exits by itself (what it printed last), before it is started again.
    private var crashed: @Sendable (Int, String) -> Void = { _, _ in }

    private init(
        settings: Settings, directory: URL, postgres: PostgresServer, broker: BenchBroker, brokerLinks: [FaultProxy], apiPorts: [Int]
    ) {
        self.settings = settings
        self.directory = directory
        self.postgres = postgres
        self.broker = broker
        self.brokerPort = broker.endpoint.port
        self.brokerLinks = brokerLinks
        self.gatewayPorts = brokerLinks.map { _ in HostPort.freeLoopbackPort() }
        self.apiPorts = apiPorts
        self.gateways = Array(repeating: nil, count: brokerLinks.count)
        self.gatewayPaused = Array(repeating: false, count: brokerLinks.count)
    }

    /// Starts PostgreSQL, the broker, the links and the gateways; returns once every gateway
    /// accepts connections.
    static func start(_ settings: Settings, in directory: URL) async throws -> ChaosCluster {
        Log.info("chaos: starting PostgreSQL, mosquitto and \(settings.gateways) imgw in \(directory.path)")
        let postgres = try await PostgresServer.start(port: HostPort.freeLoopbackPort())
        // Interrupted: an immediate shutdown (the postmaster ends its backends), then its files.
        ChildRegistry.shared.onTerminate { [postgres] in
            guard let pid = postgres.pid else { return }
            kill(pid, SIGCONT)
            kill(pid, SIGQUIT)
            for _ in 0..<100 where kill(pid, 0) == 0 { usleep(20_000) }
            try? FileManager.default.removeItem(at: postgres.directory)
        }
        do {
            let broker = try await BenchBroker.start(in: directory, extraLines: brokerLines(directory), echo: settings.verbose)
            var links: [FaultProxy] = []
            for _ in 0..<settings.gateways { links.append(try await FaultProxy.start(upstreamPort: broker.endpoint.port)) }
            let cluster = ChaosCluster(
                settings: settings, directory: directory, postgres: postgres, broker: broker, brokerLinks: links,
                apiPorts: links.map { _ in HostPort.freeLoopbackPort() })
            for index in 0..<settings.gateways { try await cluster.startGateway(index, attempts: 1) }
            return cluster
        } catch {
            await postgres.stop()
            throw error
        }
    }

    /// mosquitto's settings beside imbench's: those of imgw's embedded broker.
    private static func brokerLines(_ directory: URL) -> [String] {
        let data = directory.appendingPathComponent("mosquitto-data")
        try? FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        return ["persistence true", "persistence_location \(data.path)/", "autosave_interval 60", "max_queued_messages 10000"]
    }

    /// `archive:` for the gateways: the shared PostgreSQL database.
    private var archiveLine: String { "archive: {url: '\(postgres.url)'}" }

    /// One proxy per device in front of the gateways.
    func addDeviceLinks(_ count: Int, seed: UInt64) async throws {
        for index in deviceLinks.count..<count {
            deviceLinks.append(
                try await FaultProxy.start(
                    upstreams: gatewayPorts.map { FaultProxy.Upstream(port: $0) }, seed: seed &+ UInt64(index)))
        }
    }

    // MARK: Gateways

    /// Starts gateway `index` on its port; tries again every second (a supervisor's restart)
    /// up to `attempts` times (nil: until it starts).
    func startGateway(_ index: Int, attempts: Int? = nil) async throws {
        var tried = 0
        while true {
            tried += 1
            do {
                let gateway = try await BenchGateway.start(
                    executable: settings.imgw, broker: BrokerAddress(endpoint: HostPort(host: "127.0.0.1", port: brokerLinks[index].port)),
                    secret: settings.secret, in: directory, port: gatewayPorts[index], gatewayID: "chaos-\(index + 1)",
                    extraLines: BenchAPI.configurationLines(port: apiPorts[index], key: settings.apiKey, maxMembers: 100) + [archiveLine],
                    echo: settings.verbose, logFile: directory.appendingPathComponent("imgw-\(index + 1).log"))
                gateways[index] = gateway
                gatewayPaused[index] = false
                Task { await self.watch(gateway, index) }
                return
            } catch {
                if let attempts, tried >= attempts { throw error }
                Log.info("chaos: gateway \(index + 1) did not start (attempt \(tried)), again in 1 s: \(error)")
                try await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// Sets what is told of a gateway that exits by itself.
    func onCrash(_ body: @escaping @Sendable (Int, String) -> Void) {
        crashed = body
    }

    /// Waits for `gateway` to end: if it is still the one at `index` (nobody killed or
    /// stopped it), it exited by itself: that is told, and it is started again, as a
    /// supervisor would.
    private func watch(_ gateway: BenchGateway, _ index: Int) async {
        let status = await gateway.process.waitForExit()
        guard gateways[index] === gateway else { return }
        gateways[index] = nil
        gatewayPaused[index] = false
        ChildRegistry.shared.forget(gateway.process)
        crashed(index, "wait status \(status): \(gateway.output.last(12))")
        try? await startGateway(index)
    }

    /// kill -9 of gateway `index`; false if it was not running.
    func killGateway(_ index: Int) async -> Bool {
        guard let gateway = gateways[index] else { return false }
        gateways[index] = nil
        gateway.process.signal(SIGKILL)
        gateway.process.signal(SIGCONT)
        await gateway.process.waitForExit()
        ChildRegistry.shared.forget(gateway.process)
        return true
    }

    func isGatewayUp(_ index: Int) -> Bool { gateways[index] != nil }

    /// SIGSTOP of gateway `index`; false if it is not running or already stopped.
    func pauseGateway(_ index: Int) -> Bool {
        guard let gateway = gateways[index], !gatewayPaused[index] else { return false }
        gateway.process.signal(SIGSTOP)
        gatewayPaused[index] = true
        return true
    }

    func resumeGateway(_ index: Int) {
        guard let gateway = gateways[index], gatewayPaused[index] else { return }
        gateway.process.signal(SIGCONT)
        gatewayPaused[index] = false
    }

    /// The last lines gateway `index` printed.
    func gatewayOutput(_ index: Int) -> String { gateways[index]?.output.last(20) ?? "(not running)" }

    // MARK: Broker

    /// kill -9 of the broker; false if it was not running.
    func killBroker() async -> Bool {
        guard let broker else { return false }
        self.broker = nil
        brokerPaused = false
        broker.process.signal(SIGKILL)
        await broker.process.waitForExit()
        ChildRegistry.shared.forget(broker.process)
        return true
    }

    /// Starts the broker on its port and data again; tries every second until it runs.
    func startBroker() async throws {
        while broker == nil {
            do {
                let started = try await BenchBroker.start(
                    in: directory, port: brokerPort, extraLines: Self.brokerLines(directory), echo: settings.verbose)
                broker = started
            } catch {
                Log.info("chaos: the broker did not start, again in 1 s: \(error)")
                try await Task.sleep(for: .seconds(1))
            }
        }
    }

    func pauseBroker() -> Bool {
        guard let broker, !brokerPaused else { return false }
        broker.process.signal(SIGSTOP)
        brokerPaused = true
        return true
    }

    func resumeBroker() {
        guard let broker, brokerPaused else { return }
        broker.process.signal(SIGCONT)
        brokerPaused = false
    }

    // MARK: Database

    func killDatabase() async -> Bool {
        guard !databaseDown else { return false }
        databaseDown = true
        databasePaused = false
        await postgres.kill9()
        return true
    }

    /// Starts PostgreSQL again (it recovers from its WAL); tries every second until it runs.
    func startDatabase() async throws {
        while databaseDown {
            do {
                try await postgres.startServer()
                databaseDown = false
            } catch {
                Log.info("chaos: PostgreSQL did not start, again in 1 s: \(error)")
                try await Task.sleep(for: .seconds(1))
            }
        }
    }

    func pauseDatabase() -> Bool {
        guard !databaseDown, !databasePaused else { return false }
        postgres.freeze()
        databasePaused = true
        return true
    }

    func resumeDatabase() {
        guard databasePaused else { return }
        postgres.thaw()
        databasePaused = false
    }

    // MARK: The end

    /// Everything up and passing again: what is stopped continues, what is down starts,
    /// links pass (for the run's last phase, when every device logs in once more).
    func heal() async throws {
        resumeDatabase()
        try await startDatabase()
        resumeBroker()
        try await startBroker()
        for link in brokerLinks + deviceLinks {
            link.holdAll(false)
            link.blackholeNew(false)
            link.refuseNew(false)
        }
        for index in gateways.indices {
            resumeGateway(index)
            if gateways[index] == nil { try await startGateway(index) }
        }
    }

    /// Stops every gateway (SIGTERM), the broker, PostgreSQL and the proxies.
    func shutdown() async {
        for index in gateways.indices {
            resumeGateway(index)
            if let gateway = gateways[index] { await gateway.stop(grace: 10) }
            gateways[index] = nil
        }
        resumeBroker()
        if let broker { await broker.stop() }
        broker = nil
        for link in brokerLinks + deviceLinks { await link.stop() }
        resumeDatabase()
        await postgres.stop()
    }
}
