import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
import ServiceLifecycle

/// Serves the gateway's counters in the Prometheus text format on `GET /metrics`
/// (`metrics.host`:`metrics.port`, loopback by default).
public final class MetricsServer: Service, Sendable {
    /// Where it listens (useful with port 0).
    public let localAddress: SocketAddress
    private let channel: any Channel

    static func bind(host: String, port: Int, context: GatewayContext, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) async throws -> MetricsServer {
        let gauges = MetricsGauges(statistics: context.statistics, registry: context.registry)
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    CloseOnExec.mark(channel)
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(MetricsHandler(gauges: gauges))
                }
            }
            .bind(host: host, port: port).get()
        _ = try await channel.eventLoop.submit { CloseOnExec.mark(channel) }.get()
        context.logger.info("metrics on /metrics", metadata: ["address": "\(channel.localAddress?.description ?? "?")"])
        return MetricsServer(channel: channel)
    }

    private init(channel: any Channel) {
        self.channel = channel
        self.localAddress = channel.localAddress!
    }

    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await channel.closeFuture.get()
        } onGracefulShutdown: {
            self.channel.close(promise: nil)
        }
    }

    public func stop() async {
        try? await channel.close()
    }
}

/// The gauges, refreshed from the gateway's counters at each scrape.
final class MetricsGauges: Sendable {
    let prometheus: PrometheusCollectorRegistry
    private let statistics: GatewayStatistics
    private let connections: Gauge
    private let loggedIn: Gauge
    private let messagesIn: Gauge
    private let messagesOut: Gauge
    private let forgedMessages: Gauge

    init(statistics: GatewayStatistics, registry: SessionRegistry) {
        self.statistics = statistics
        let prometheus = PrometheusCollectorRegistry()
        self.prometheus = prometheus
        func gauge(_ name: String, _ unit: String, _ help: String) -> Gauge {
            prometheus.makeGauge(descriptor: MetricNameDescriptor(namespace: "imgw", metricName: name, unitName: unit, helpText: help))
        }
        connections = gauge("connections", "", "Open TLV connections")
        loggedIn = gauge("logged_in", "", "Logged-in devices (each with its MQTT session)")
        messagesIn = gauge("chat_messages_in", "total", "Chat messages accepted from devices")
        messagesOut = gauge("messages_out", "total", "Messages written to devices")
        forgedMessages = gauge("forged_messages_dropped", "total", "Chats, receipts, shares and positions on the broker that no gateway wrote, dropped")
    }

    func render() -> [UInt8] {
        connections.set(Double(statistics.connections.live))
        loggedIn.set(Double(statistics.loggedIn.load(ordering: .relaxed)))
        messagesIn.set(Double(statistics.messagesIn.load(ordering: .relaxed)))
        messagesOut.set(Double(statistics.messagesOut.load(ordering: .relaxed)))
        forgedMessages.set(Double(statistics.forgedMessages.load(ordering: .relaxed)))
        return prometheus.emitToBuffer()
    }
}

/// `GET /metrics` -> the Prometheus text; anything else -> 404.
final class MetricsHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let gauges: MetricsGauges
    private var path = ""

    init(gauges: MetricsGauges) {
        self.gauges = gauges
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            path = head.uri
        case .body:
            break
        case .end:
            let found = path == "/metrics" || path.hasPrefix("/metrics?")
            let body = found ? gauges.render() : Array("not found: try /metrics\n".utf8)
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: found ? "text/plain; version=0.0.4" : "text/plain")
            headers.add(name: "Content-Length", value: "\(body.count)")
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: found ? .ok : .notFound, headers: headers))), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}
