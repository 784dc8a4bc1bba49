import ArgumentParser
import Foundation
import IMGateway
import Logging
import NIOCore
import ServiceLifecycle

@main
struct IMGW: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "imgw",
        abstract: "IMGateway: mobile IM clients (TLV over TCP) on an MQTT broker.",
        version: IMGatewayInfo.version,
        subcommands: [Serve.self, CheckConfig.self],
        defaultSubcommand: Serve.self)
}

struct ConfigOptions: ParsableArguments {
    @Option(name: .shortAndLong, help: "Configuration file (YAML). Without it, built-in defaults (see config/imgw.yaml).")
    var config: String?

    func load() throws -> GatewayConfiguration {
        guard let config else { return GatewayConfiguration.defaults }
        return try GatewayConfiguration.load(from: config)
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the gateway.")

    @OptionGroup var options: ConfigOptions

    @Option(help: "Broker to use, mqtt://HOST:PORT or mqtts://HOST:PORT (overrides the configuration; without one imgw starts an embedded mosquitto).")
    var broker: String?

    @Option(help: "Listen address HOST:PORT for TLV clients (overrides the configuration).")
    var listen: String?

    func run() async throws {
        var configuration = try options.load()
        if let broker { configuration.broker.url = broker }
        if let listen {
            let parts = listen.split(separator: ":")
            guard parts.count == 2, let port = Int(parts[1]) else { throw ValidationError("--listen wants HOST:PORT") }
            configuration.listen.host = String(parts[0])
            configuration.listen.port = port
        }
        try configuration.validateForGateway()
        // Before anything uses NIO's shared event loops (NIO's own environment variable,
        // if set, wins).
        if ProcessInfo.processInfo.environment["NIO_SINGLETON_GROUP_LOOP_COUNT"] == nil {
            NIOSingletons.groupLoopCountSuggestion = configuration.listen.eventLoopThreads(cores: System.coreCount)
        }

        let logLevel = Logger.Level(rawValue: configuration.logLevel) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = logLevel
            return handler
        }
        let logger = Logger(label: "imgw")
        for warning in configuration.warnings() {
            logger.warning("\(warning)")
        }

        var services: [any Service] = []
        let endpoint: BrokerEndpoint
        if let configured = try BrokerEndpoint(settings: configuration.broker) {
            endpoint = configured
        } else {
            let embedded = try EmbeddedBroker(settings: configuration.embeddedBroker, topicPrefix: configuration.topicPrefix, logger: logger)
            try await embedded.start()
            services.append(embedded)
            endpoint = embedded.endpoint
        }
        let server = try await GatewayServer.bind(configuration: configuration, broker: endpoint, logger: logger)
        // The embedded broker first: it stops last, after the gateway's services.
        let group = ServiceGroup(
            configuration: .init(
                services: services.map { .init(service: $0) } + server.services,
                gracefulShutdownSignals: [.sigterm, .sigint, .sighup],
                logger: logger))
        try await group.run()
    }
}

struct CheckConfig: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "check-config", abstract: "Validate a configuration file and print warnings.")

    @OptionGroup var options: ConfigOptions

    @Flag(help: "Do not connect to broker.url (by default check-config tries it anonymously and with the gateway's credentials).")
    var offline = false

    func run() async throws {
        let configuration = try options.load()
        try configuration.validateForGateway()
        for warning in configuration.warnings() {
            print("warning: \(warning)")
        }
        var failed = false
        if let broker = try BrokerEndpoint(settings: configuration.broker) {
            if !offline {
                for finding in await BrokerCheck.run(broker, prefix: configuration.topicPrefix, settings: configuration.broker) {
                    print("broker: \(finding)")
                    failed = failed || finding.level == .error
                }
            }
        } else if let plugin = EmbeddedBroker.findSecurityPlugin() {
            print("broker: ok: the embedded broker refuses anonymous clients; accounts imgw and imgw-observer (read-only), passwords in \(configuration.embeddedBroker.dataDir), enforced by \(plugin)")
        } else {
            print("broker: error: the embedded broker needs mosquitto's dynamic security plugin (mosquitto_dynamic_security.so, mosquitto 2.0 or later): apt-get install mosquitto")
            failed = true
        }
        if failed { throw ExitCode(1) }
        print("\(options.config ?? "built-in defaults"): OK")
    }
}
