import ChildProcesses
import IMArchive
import IMWire
import Logging
import Mosquitto
import NIOCore
import NIOExtras
import NIOPosix
import NIOSSL
import ServiceLifecycle

/// The TLV listener: accepts device connections and runs each one (login, MQTT session,
/// chat) until it ends. A `Service`: on graceful shutdown it stops accepting, tells the
/// logged-in devices, and ends their MQTT sessions (the broker publishes their wills).
public final class GatewayServer: Service, Sendable {
    /// Where the listener is bound (useful with port 0).
    public let localAddress: SocketAddress
    /// The Prometheus endpoint, unless `metrics.enabled` is false.
    public let metrics: HTTPEndpoint?
    /// The server API, when `api.keys` has a key.
    public let api: HTTPEndpoint?
    /// The WebSocket listener, when `listen.websocket.enabled`.
    public let websocket: HTTPEndpoint?
    private let serverChannel: any Channel
    private let quiesce: ServerQuiescingHelper
    private let context: GatewayContext
    /// The gateway's control client: the backend's disconnects and revocations, the API's
    /// publishes and lookups.
    private let control: ControlClient
    /// Where every chat goes (devices' and the server API's).
    private let acceptance: ChatAcceptance

    /// Opens the message archive (`archive`), then binds the listener. Nothing is accepted
    /// until `run()`. Throws ``GatewayError/archiveFailed(_:)`` when the archive cannot be
    /// opened, ``GatewayError/archiveNotShared(_:)`` when it is a SQLite file and another
    /// gateway publishes live stats on the broker (``SharedBrokerCheck``).
    public static func bind(
        configuration: GatewayConfiguration,
        broker: BrokerEndpoint,
        logger: Logger,
        mqttLoop: MosquittoEventLoop? = nil,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> GatewayServer {
        // Before the shared MQTT loop exists (making it decides libmosquitto's internals).
        useInternals(configuration.broker.libmosquittoInternals, logger: logger)
        let mqttLoop = mqttLoop ?? .shared
        if configuration.archive.store == .sqlite && configuration.statsInterval > 0 {
            let others = await SharedBrokerCheck.otherGateways(
                broker: broker, topics: configuration.topics, gatewayID: configuration.gatewayID, statsInterval: configuration.statsInterval,
                loop: mqttLoop, logger: logger)
            if let others, !others.isEmpty {
                throw GatewayError.archiveNotShared(
                    "another gateway uses this broker (\(others.joined(separator: ", "))), and this one's message archive is a SQLite file "
                        + "of its own: a device moving between them would miss what the other stored. Give every gateway the same "
                        + "PostgreSQL archive (archive.url), or set archive.store to none")
            }
        }
        let archive = try await GatewayArchive.open(configuration.archive, logger: logger)
        do {
            return try await bind(configuration: configuration, broker: broker, logger: logger, archive: archive, mqttLoop: mqttLoop, group: group)
        } catch {
            await archive?.store.close()
            throw error
        }
    }

    /// Applies `broker.libmosquitto_internals` (before the first MQTT client: afterwards the
    /// library has decided) and logs which private parts of libmosquitto are in use.
    static func useInternals(_ allowed: Bool, logger: Logger) {
        if !allowed && !MosquittoLibrary.disableInternals() {
            logger.warning("broker.libmosquitto_internals is false, but MQTT clients were made before: libmosquitto's internals stay as they are")
        }
        let parts = privateParts
        let inUse = parts.filter(\.inUse).map(\.name)
        let off = parts.filter { !$0.inUse }.map(\.name)
        func names(_ parts: [String]) -> String {
            parts.isEmpty ? "none" : parts.joined(separator: ",")
        }
        let why = if off.isEmpty {
            "-"
        } else if MosquittoLibrary.internalsDisabled {
            "turned off (broker.libmosquitto_internals or \(MosquittoLibrary.environmentVariable))"
        } else {
            "not checked for this libmosquitto or platform"
        }
        let version = MosquittoLibrary.version
        logger.notice("libmosquitto internals", metadata: [
            "in-use": "\(names(inUse))", "off": "\(names(off))", "why-off": "\(why)",
            "libmosquitto": "\(version.major).\(version.minor).\(version.revision)",
        ])
    }

    /// The private parts of other libraries in use, by name, sorted: libmosquitto's
    /// (``MosquittoLibrary/internals``) and SwiftNIO's channel description (``CloseOnExec``).
    static var privateParts: [(name: String, inUse: Bool)] {
        let internals = MosquittoLibrary.internals
        let parts = MosquittoLibrary.Internal.allCases.map { ($0.rawValue, internals.contains($0)) } + [(CloseOnExec.partName, CloseOnExec.inUse)]
        return parts.sorted { $0.0 < $1.0 }.map { (name: $0.0, inUse: $0.1) }
    }

    private static func bind(
        configuration: GatewayConfiguration, broker: BrokerEndpoint, logger: Logger, archive: MessageArchive?,
        mqttLoop: MosquittoEventLoop, group: any EventLoopGroup
    ) async throws -> GatewayServer {
        let context = GatewayContext(configuration: configuration, broker: broker, mqttLoop: mqttLoop, logger: logger, archive: archive)
        let control = ControlClient(context: context)
        let acceptance = ChatAcceptance(context: context, relay: control)
        let tls = try configuration.listen.tls.map { try Self.tlsContext($0) }
        let quiesce = ServerQuiescingHelper(group: group)
        let channel = try await ServerBootstrap(group: group)
            // Every accepted connection is known, so that shutdown reaches those that have
            // not logged in (yet) too.
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(quiesce.makeServerChannelHandler(channel: channel))
                }
            }
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            // Each connection keeps its receive buffer between reads (NIO pools it per
            // channel): NIO's initial 2 KiB was a sixth of a logged-in device's memory,
            // while an idle device reads a 28-byte heartbeat now and then. It grows (up to
            // 64 KiB) for a device whose reads fill it.
            .childChannelOption(.recvAllocator, value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 256, maximum: 65536))
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    // SwiftNIO's description names the descriptor: read only with the internals
                    // allowed (ChildProcess closes inherited descriptors in children anyway).
                    CloseOnExec.mark(child)
                    if let tls {
                        try child.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls))
                    }
                    try Self.installDevice(on: child, context: context, acceptance: acceptance, transport: .tcp)
                }
            }
            .bind(host: configuration.listen.host, port: configuration.listen.port)
            .get()
        if CloseOnExec.inUse, try await !channel.eventLoop.submit({ CloseOnExec.mark(channel) }).get() {
            logger.warning("cannot mark the listening socket close-on-exec (SwiftNIO hides its descriptor)")
        }
        let metrics = configuration.metrics.enabled
            ? HTTPEndpoint.metrics(host: configuration.metrics.host, port: configuration.metrics.port, context: context)
            : nil
        context.groups.follow(with: control)
        let api = configuration.api.enabled ? try HTTPEndpoint.api(context: context, broker: control, acceptance: acceptance) : nil
        let websocket = configuration.listen.websocket.enabled
            ? WebSocketListener.endpoint(context: context, tls: tls) { child in
                try child.pipeline.syncOperations.addHandler(
                    WebSocketDeviceFraming(logger: ConnectionLogger(context.logger, peer: child.remoteAddress?.description ?? "?")))
                try Self.installDevice(on: child, context: context, acceptance: acceptance, transport: .websocket)
            }
            : nil
        return GatewayServer(
            serverChannel: channel, quiesce: quiesce, context: context, metrics: metrics, api: api, websocket: websocket, control: control,
            acceptance: acceptance)
    }

    /// Adds a device connection's handlers to `child` (on its event loop): the TLV decoder and
    /// a ``DeviceConnection``, or, for a connection ``ConnectionAdmissions`` refuses, the
    /// refusal. For TCP the channel carries the TLV stream itself; for WebSocket,
    /// ``WebSocketDeviceFraming`` before them does.
    static func installDevice(on child: any Channel, context: GatewayContext, acceptance: ChatAcceptance, transport: DeviceTransport) throws {
        let limits = context.configuration.limits
        let address = child.remoteAddress?.ipAddress ?? "?"
        switch context.admissions.open(address: address) {
        case .success(let ticket):
            do {
                try child.pipeline.syncOperations.addHandlers([
                    ByteToMessageHandler(IMFrameDecoder(maxBodyLength: limits.maxBodyLength)),
                    // (It encodes its frames itself.)
                    DeviceConnection(
                        gateway: context, acceptance: acceptance, peer: child.remoteAddress?.description ?? "?",
                        admission: ticket, transport: transport),
                ])
            } catch {
                // No handler will report the close (a peer gone already): the
                // place is given back now.
                ticket.closed()
                throw error
            }
        case .failure(let refusal):
            context.logger.notice("connection refused", metadata: ["peer": "\(address)", "transport": "\(transport)", "reason": "\(refusal.reason)"])
            try child.pipeline.syncOperations.addHandlers([
                MessageToByteHandler(IMFrameEncoder(maxBodyLength: limits.maxBodyLength)),
                ConnectionRefusal(reason: refusal.reason),
            ])
        }
    }

    /// The server side of TLS for device connections (`listen.tls`: PEM certificate chain
    /// and key). TLS 1.2 or newer.
    static func tlsContext(_ settings: GatewayConfiguration.TLSSettings) throws -> NIOSSLContext {
        let chain = try NIOSSLCertificate.fromPEMFile(settings.certFile).map { NIOSSLCertificateSource.certificate($0) }
        let key = try NIOSSLPrivateKey(file: settings.keyFile, format: .pem)
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        return try NIOSSLContext(configuration: configuration)
    }

    private init(
        serverChannel: any Channel,
        quiesce: ServerQuiescingHelper,
        context: GatewayContext,
        metrics: HTTPEndpoint?,
        api: HTTPEndpoint?,
        websocket: HTTPEndpoint?,
        control: ControlClient,
        acceptance: ChatAcceptance
    ) {
        self.serverChannel = serverChannel
        self.quiesce = quiesce
        self.localAddress = serverChannel.localAddress!
        self.context = context
        self.metrics = metrics
        self.api = api
        self.websocket = websocket
        self.control = control
        self.acceptance = acceptance
    }

    /// The gateway as services for a `ServiceGroup`, in their order: its helpers (the message
    /// archive's writer, the control client, the offline-push webhook, the HTTP endpoints,
    /// the stats topic, the location share directory), then the listener itself (which runs
    /// the WebSocket listener too). Graceful shutdown goes the other way: the listeners first
    /// (their devices are told and closed), until the last connection has
    /// finished (its MQTT session ended), then each helper (the archive commits what the last
    /// connections left, then closes). A helper that ends early (the stats topic turned off)
    /// leaves the others running; the listener's end ends the group.
    public var services: [ServiceGroupConfiguration.ServiceConfiguration] {
        let context = self.context
        let control = self.control
        var helpers: [any Service] = []
        if let archive = context.archive { helpers.append(Helper("message archive") { await archive.run() }) }
        helpers.append(Helper("control client") { await control.run() })
        if let push = context.push { helpers.append(Helper("offline push") { await push.run() }) }
        helpers += [metrics, api].compactMap { $0 }
        helpers.append(Helper("stats") { await StatsPublisher(context: context).run() })
        helpers.append(Helper("location shares") { await LocationShareDirectory.follow(context.shares, context: context) })
        return helpers.map { .init(service: $0, successTerminationBehavior: .ignore) }
            + [.init(service: self, successTerminationBehavior: .gracefullyShutdownGroup)]
    }

    /// One of the gateway's long-lived helpers, which runs until cancelled: cancelled at the
    /// group's graceful shutdown (after the listener, which comes later in ``services``).
    private struct Helper: Service, CustomStringConvertible {
        let description: String
        let body: @Sendable () async -> Void

        init(_ description: String, _ body: @escaping @Sendable () async -> Void) {
            self.description = description
            self.body = body
        }

        func run() async {
            await cancelWhenGracefulShutdown { await body() }
        }
    }

    /// Accepts and serves connections until the listener is closed or graceful shutdown
    /// (``shutdown()``), then waits for the last connection to finish. Run it with its helpers,
    /// in a `ServiceGroup` of ``services``. Throws when an HTTP endpoint cannot listen, before
    /// "listening".
    public func run() async throws {
        let context = self.context
        let websocket = self.websocket
        let acceptance = self.acceptance
        try await withGracefulShutdownHandler {
            try await withThrowingDiscardingTaskGroup { group in
                // The WebSocket listener runs as part of this one: its devices are connections
                // like the TCP ones, told at shutdown and waited for below.
                if let websocket { group.addTask { try await websocket.run() } }
                for endpoint in [metrics, api, websocket].compactMap({ $0 }) {
                    let address = try await endpoint.localAddress()
                    context.logger.info("\(endpoint.name) on HTTP", metadata: ["address": "\(address)"])
                }
                context.logger.info("listening", metadata: ["address": "\(localAddress)", "broker": "\(context.broker)"])
                // Connections are served by their channel handlers; this waits for the listener
                // to close, then for the last connection to finish.
                try? await serverChannel.closeFuture.get()
                await websocket?.stop()
                await context.statistics.connections.waitUntilZero()
                // Chats whose connection has ended are still published (the control client,
                // which takes over, stops after this).
                await acceptance.waitUntilIdle()
            }
        } onGracefulShutdown: {
            self.shutdown()
        }
    }

    /// Graceful shutdown: no new connections; every connection gets KICK
    /// SERVER_SHUTTING_DOWN (NIO's quiescing event) and is closed, and the MQTT sessions of
    /// logged-in devices end with their wills. ``run()`` returns once the last connection
    /// has finished.
    public func shutdown() {
        context.logger.info("shutting down: no new connections, sessions end with their wills")
        quiesce.initiateShutdown(promise: nil)
    }

    /// Closes the listener (connections being served go on until they end; the HTTP
    /// endpoints stop when ``run()`` returns).
    public func stop() async {
        try? await serverChannel.close()
    }
}
