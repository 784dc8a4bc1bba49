import Foundation
import IMGateway

#if canImport(Glibc)
import Glibc
#endif

/// The broker and gateway of one run: started here (and stopped by ``shutdown()``), or
/// given on the command line.
struct BenchEnvironment: Sendable {
    /// The MQTT broker (the gateway's, and the direct path's).
    let broker: BrokerAddress
    /// The TLV listener of the gateway (its WebSocket listener with `--transport websocket`).
    let gateway: HostPort
    /// The WebSocket path devices upgrade on, with `--transport websocket`.
    var webSocketPath: String? = nil
    /// The gateway's JWT secret, for minting tokens.
    let secret: String
    /// The broker and gateway processes, if started here.
    let brokerProcess: BenchBroker?
    let gatewayProcess: BenchGateway?
    /// The run's temporary directory.
    let directory: URL

    /// The gateway's pid, when imbench started it.
    var gatewayPID: pid_t? { gatewayProcess?.process.pid }
    /// The broker's pid, when imbench started it or was told (`--broker-pid`).
    var brokerPID: pid_t? { brokerProcess?.process.pid ?? givenBrokerPID }
    /// `--broker-pid`.
    let givenBrokerPID: pid_t?

    /// Starts what `options` does not name, and returns once both accept connections.
    /// - Parameters:
    ///   - gateway: false when only the broker is needed (no imgw is started).
    ///   - brokerLines: Extra mosquitto.conf lines (global section).
    ///   - gatewayLines: Extra imgw YAML lines (top level).
    static func start(
        _ options: EnvironmentOptions, gateway needsGateway: Bool = true, brokerLines: [String] = [],
        gatewayLines: [String] = []
    ) async throws -> BenchEnvironment {
        ChildRegistry.sweepOrphans()
        let run = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(ChildRegistry.directoryPrefix + run)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        ChildRegistry.shared.removeLater(directory.path)
        do {
            return try await start(options, in: directory, needsGateway: needsGateway, brokerLines, gatewayLines)
        } catch {
            ChildRegistry.shared.removeDirectories()
            throw error
        }
    }

    /// Starts the broker (unless given), then the gateway (unless given or not needed); stops
    /// the broker again if the gateway fails.
    private static func start(
        _ options: EnvironmentOptions, in directory: URL, needsGateway: Bool, _ brokerLines: [String],
        _ gatewayLines: [String]
    ) async throws -> BenchEnvironment {
        var brokerProcess: BenchBroker? = nil
        let broker: BrokerAddress
        if let given = options.broker {
            broker = BrokerAddress(endpoint: given, username: options.brokerUsername, password: options.brokerPassword)
            guard given.acceptsConnections() else { throw BenchError("no broker accepts connections at \(given)") }
        } else {
            Log.info("starting mosquitto...")
            let started = try await BenchBroker.start(in: directory, extraLines: brokerLines, echo: options.verbose)
            brokerProcess = started
            broker = BrokerAddress(endpoint: started.endpoint)
            Log.info("mosquitto up on \(broker) (pid \(started.process.pid))")
        }
        do {
            if !needsGateway {
                return BenchEnvironment(
                    broker: broker, gateway: options.gateway ?? broker.endpoint, secret: options.secret ?? "",
                    brokerProcess: brokerProcess, gatewayProcess: nil, directory: directory, givenBrokerPID: options.brokerPID)
            }
            if let gateway = options.gateway, let secret = options.secret {
                guard gateway.acceptsConnections() else { throw BenchError("no gateway accepts connections at \(gateway)") }
                return BenchEnvironment(
                    broker: broker, gateway: gateway, secret: secret, brokerProcess: brokerProcess, gatewayProcess: nil,
                    directory: directory, givenBrokerPID: options.brokerPID)
            }
            let secret = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
            if let copy = options.archiveCopy {
                Log.info("copying the archive \(copy)...")
                try FileManager.default.copyItem(atPath: copy, toPath: directory.appendingPathComponent("archive.sqlite").path)
            }
            Log.info("starting imgw...")
            let gateway = try await BenchGateway.start(
                executable: options.imgw ?? BenchGateway.defaultExecutable(), broker: broker, secret: secret,
                in: directory, webSocket: options.transport == .websocket, extraLines: gatewayLines + [options.archiveLine(in: directory)],
                echo: options.verbose)
            Log.info("imgw up on \(gateway.endpoint) (pid \(gateway.process.pid))")
            // With --transport websocket, devices reach the gateway on its WebSocket listener.
            let webSocket = gateway.webSocketPort.map { HostPort(host: "127.0.0.1", port: $0) }
            if let webSocket { Log.info("devices connect over WebSocket: ws://\(webSocket)\(BenchGateway.webSocketPath)") }
            return BenchEnvironment(
                broker: broker, gateway: webSocket ?? gateway.endpoint, webSocketPath: webSocket.map { _ in BenchGateway.webSocketPath },
                secret: secret, brokerProcess: brokerProcess, gatewayProcess: gateway, directory: directory,
                givenBrokerPID: options.brokerPID)
        } catch {
            await brokerProcess?.stop()
            throw error
        }
    }

    /// Stops what was started here (gateway first, then broker) and removes the directory.
    func shutdown() async {
        if let gatewayProcess { await gatewayProcess.stop() }
        if let brokerProcess { await brokerProcess.stop() }
        ChildRegistry.shared.removeDirectories()
    }

    /// Last lines of the started processes' output, for error messages.
    var diagnostics: String {
        var parts: [String] = []
        if let gatewayProcess { parts.append("imgw: \(gatewayProcess.output.last(5))") }
        if let brokerProcess { parts.append("mosquitto: \(brokerProcess.output.last(3))") }
        return parts.joined(separator: "; ")
    }

    /// `error` as the command's failure, with the last lines the processes printed.
    func failure(_ error: any Error) -> BenchError {
        let diagnostics = diagnostics
        return BenchError("\(error)" + (diagnostics.isEmpty ? "" : " (\(diagnostics))"))
    }

    /// Starts an environment, prints the line `measure` returns, and stops the environment
    /// whatever happens (a failure carries what its processes printed).
    static func measure(_ options: EnvironmentOptions, _ measure: (BenchEnvironment) async throws -> JSONLine) async throws {
        let env = try await start(options)
        do {
            let json = try await measure(env)
            await env.shutdown()
            json.print()
        } catch {
            let failure = env.failure(error)
            await env.shutdown()
            throw failure
        }
    }
}
