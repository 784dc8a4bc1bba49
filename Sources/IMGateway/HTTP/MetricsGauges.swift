import Hummingbird
import NIOCore
import Prometheus

/// The gauges, refreshed from the gateway's counters at each scrape.
final class MetricsGauges: Sendable {
    let prometheus: PrometheusCollectorRegistry
    private let statistics: GatewayStatistics
    private let connections: Gauge
    private let loggedIn: Gauge
    private let messagesIn: Gauge
    private let messagesOut: Gauge
    private let forgedMessages: Gauge
    private let quotaDisconnects: Gauge
    private let push: [(Gauge, @Sendable () -> Int)]

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
        quotaDisconnects = gauge(
            "broker_quota_disconnects", "total",
            "Device sessions the broker ended because their queue was full (Quota exceeded): what it held for them is lost")
        let counters = statistics.push
        push = [
            (gauge("push_queued", "", "Offline-push notifications waiting or in flight"), { @Sendable in counters.queued.load(ordering: .relaxed) }),
            (gauge("push_delivered", "total", "Offline-push notifications the webhook accepted (2xx)"), { @Sendable in counters.delivered.load(ordering: .relaxed) }),
            (gauge("push_suppressed", "total", "Offline-push notifications queued, then not sent: a device of the recipient came online"), { @Sendable in counters.suppressed.load(ordering: .relaxed) }),
            (gauge("push_retries", "total", "Offline-push POSTs that failed and were retried"), { @Sendable in counters.retries.load(ordering: .relaxed) }),
            (gauge("push_failed", "total", "Offline-push notifications given up (out of attempts, or refused by the webhook)"), { @Sendable in counters.failed.load(ordering: .relaxed) }),
            (gauge("push_dropped", "total", "Offline-push notifications dropped because the queue was full"), { @Sendable in counters.dropped.load(ordering: .relaxed) }),
        ]
    }

    func render() -> [UInt8] {
        connections.set(Double(statistics.connections.live))
        loggedIn.set(Double(statistics.loggedIn.load(ordering: .relaxed)))
        messagesIn.set(Double(statistics.messagesIn.load(ordering: .relaxed)))
        messagesOut.set(Double(statistics.messagesOut.load(ordering: .relaxed)))
        forgedMessages.set(Double(statistics.forgedMessages.load(ordering: .relaxed)))
        quotaDisconnects.set(Double(statistics.brokerQuotaDisconnects.load(ordering: .relaxed)))
        for (gauge, value) in push { gauge.set(Double(value())) }
        return prometheus.emitToBuffer()
    }
}

extension HTTPEndpoint {
    /// `GET /metrics`: the gateway's counters in the Prometheus text format (other paths 404).
    static func metrics(host: String, port: Int, context: GatewayContext) -> HTTPEndpoint {
        let gauges = MetricsGauges(statistics: context.statistics, registry: context.registry)
        let router = Router(context: GatewayRequestContext.self)
        router.get("metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: gauges.render())))
        }
        return HTTPEndpoint(name: "metrics", host: host, port: port, router: router, logger: context.logger)
    }
}
