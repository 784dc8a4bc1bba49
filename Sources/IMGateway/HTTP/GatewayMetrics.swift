import Hummingbird
import IMArchive
import Mosquitto
import NIOCore
import Prometheus
import Synchronization

/// The gateway's metrics, refreshed from its counters at each scrape: levels as gauges,
/// running totals (`*_total`) as Prometheus counters.
final class GatewayMetrics: Sendable {
    let prometheus: PrometheusCollectorRegistry
    /// Levels: set to the value at each scrape.
    private let gauges: [(Gauge, @Sendable () -> Double)]
    /// Totals: moved on by what they grew since the last scrape.
    private let counters: [(Counter, @Sendable () -> Double)]
    /// What each of ``counters`` stood at when last exported.
    private let exported: Mutex<[Double]>

    init(statistics: GatewayStatistics, archive: MessageArchive? = nil) {
        let prometheus = PrometheusCollectorRegistry()
        self.prometheus = prometheus
        func descriptor(_ name: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
            MetricNameDescriptor(namespace: "imgw", metricName: name, unitName: unit, helpText: help)
        }
        typealias Reading = (name: String, unit: String, help: String, value: @Sendable () -> Double)
        let push = statistics.push
        var levels: [Reading] = [
            ("push_queued", "", "Offline-push notifications waiting or in flight", { Self.count(push.queued) }),
        ]
        var totals: [Reading] = [
            ("chat_rate_limited", "total", "Chat messages refused RATE_LIMITED (limits.chat_rate)", { Self.count(statistics.chatRateLimited) }),
            ("forged_messages_dropped", "total", "Chats, receipts, shares and positions on the broker that no gateway wrote, dropped",
             { Self.count(statistics.forgedMessages) }),
            ("broker_quota_disconnects", "total",
             "Device sessions the broker ended because their queue was full (Quota exceeded): without an archive, what it held for them is lost",
             { Self.count(statistics.brokerQuotaDisconnects) }),
            ("push_delivered", "total", "Offline-push notifications the webhook accepted (2xx)", { Self.count(push.delivered) }),
            ("push_suppressed", "total", "Offline-push notifications queued, then not sent: a device of the recipient came online",
             { Self.count(push.suppressed) }),
            ("push_retries", "total", "Offline-push POSTs that failed and were retried", { Self.count(push.retries) }),
            ("push_failed", "total", "Offline-push notifications given up (out of attempts, or refused by the webhook)", { Self.count(push.failed) }),
            ("push_dropped", "total", "Offline-push notifications dropped because the queue was full", { Self.count(push.dropped) }),
        ]
        if let archive {
            let numbers = archive.statistics
            let archiveLevels: [Reading] = [
                ("archive_available", "", "1 while the message archive takes writes, 0 while chats are refused with STORE_UNAVAILABLE",
                 { archive.isAvailable ? 1 : 0 }),
                ("archive_queued", "", "Chat messages waiting for the archive's next commit", { Double(archive.queued) }),
            ]
            let archiveTotals: [Reading] = [
                ("archive_stored", "total", "Chat messages stored in the archive", { Self.count(numbers.stored) }),
                ("archive_duplicates", "total", "Chat messages found stored already (resends)", { Self.count(numbers.duplicates) }),
                ("archive_refused", "total", "Chat messages refused because the archive could not store them (STORE_UNAVAILABLE)",
                 { Self.count(numbers.refused) }),
                ("archive_commits", "total", "Archive transactions committed (group commit: several messages each)", { Self.count(numbers.commits) }),
                ("archive_commit", "seconds_total", "Time spent committing to the archive", { Self.count(numbers.commitNanoseconds) / 1e9 }),
                ("archive_failed_commits", "total", "Archive commits that failed or took longer than archive.write_timeout",
                 { Self.count(numbers.failedCommits) }),
                ("archive_read_failures", "total", "Archive reads (catching devices up) that failed or took too long",
                 { Self.count(numbers.readFailures) }),
                ("archive_deleted", "total", "Messages deleted by retention", { Self.count(numbers.deleted) }),
                ("archive_trimmed", "total", "Stream entries deleted by the cap per conversation (archive.max_per_conversation)",
                 { Self.count(numbers.trimmed) }),
                ("caught_up", "total", "Chat deliveries replayed from the archive to devices that had missed them",
                 { Self.count(statistics.caughtUp) }),
            ]
            levels += archiveLevels
            totals += archiveTotals
        }
        var gauges = levels.map { (prometheus.makeGauge(descriptor: descriptor($0.name, $0.unit, $0.help)), $0.value) }
        var labelledCounters: [(Counter, @Sendable () -> Double)] = []
        // Per transport (`transport="tcp"` or `"websocket"`; chats from the server API are
        // `"api"`): a series's sum is the gateway's total.
        for transport in DeviceTransport.allCases {
            let counters = statistics.transport(transport)
            let labels = [("transport", transport.rawValue)]
            let levels: [Reading] = [
                ("connections", "", "Open device connections (TLV over TCP or WebSocket)", { Self.count(counters.connections) }),
                ("logged_in", "", "Logged-in devices (each with its MQTT session)", { Self.count(counters.loggedIn) }),
            ]
            let totals: [Reading] = [
                ("logins", "total", "Logins (LOGIN_OK sent)", { Self.count(counters.logins) }),
                ("chat_messages_in", "total", "Chat messages accepted from devices and the server API", { Self.count(counters.messagesIn) }),
                ("messages_out", "total", "Messages written to devices", { Self.count(counters.messagesOut) }),
            ]
            gauges += levels.map { (prometheus.makeGauge(descriptor: descriptor($0.name, $0.unit, $0.help), labels: labels), $0.value) }
            labelledCounters += totals.map { (prometheus.makeCounter(descriptor: descriptor($0.name, $0.unit, $0.help), labels: labels), $0.value) }
        }
        labelledCounters.append((
            prometheus.makeCounter(
                descriptor: descriptor("chat_messages_in", "total", "Chat messages accepted from devices and the server API"),
                labels: [("transport", "api")]),
            { Self.count(statistics.apiMessagesIn) }))
        // Which private parts of libmosquitto (and SwiftNIO's channel description, for
        // close-on-exec) the gateway uses (broker.libmosquitto_internals).
        for part in GatewayServer.privateParts {
            let gauge = prometheus.makeGauge(
                descriptor: descriptor("libmosquitto_internal", "", "1 when this private part of libmosquitto (or SwiftNIO's, close_on_exec) is in use (broker.libmosquitto_internals)"),
                labels: [("name", part.name)])
            let inUse: Double = part.inUse ? 1 : 0
            gauges.append((gauge, { inUse }))
        }
        self.gauges = gauges
        counters = totals.map { (prometheus.makeCounter(descriptor: descriptor($0.name, $0.unit, $0.help)), $0.value) } + labelledCounters
        exported = Mutex(Array(repeating: 0, count: counters.count))
    }

    private static func count(_ atomic: borrowing Atomic<Int>) -> Double {
        Double(atomic.load(ordering: .relaxed))
    }

    func render() -> [UInt8] {
        for (gauge, value) in gauges { gauge.set(value()) }
        exported.withLock { exported in
            for (index, (counter, value)) in counters.enumerated() {
                let now = value()
                if now > exported[index] { counter.increment(by: now - exported[index]) }
                exported[index] = max(exported[index], now)
            }
        }
        return prometheus.emitToBuffer()
    }
}

extension HTTPEndpoint {
    /// `GET /metrics`: the gateway's counters in the Prometheus text format (other paths 404).
    static func metrics(host: String, port: Int, context: GatewayContext) -> HTTPEndpoint {
        let metrics = GatewayMetrics(statistics: context.statistics, archive: context.archive)
        let router = Router(context: GatewayRequestContext.self)
        router.get("metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: metrics.render())))
        }
        return HTTPEndpoint(name: "metrics", host: host, port: port, router: router, logger: context.logger)
    }
}
