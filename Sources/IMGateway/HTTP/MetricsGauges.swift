import Hummingbird
import IMArchive
import NIOCore
import Prometheus
import Synchronization

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
    /// The message archive's gauges and counters (none without an archive).
    private let archiveGauges: [(Gauge, @Sendable () -> Double)]
    private let archiveCounters: [(Counter, @Sendable () -> Double)]
    /// What each of ``archiveCounters`` stood at when last exported (a Prometheus counter is
    /// moved on by the difference).
    private let exported = Mutex<[Double]>([])

    init(statistics: GatewayStatistics, registry: SessionRegistry, archive: MessageArchive? = nil) {
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
        guard let archive else {
            archiveGauges = []
            archiveCounters = []
            return
        }
        func counter(_ name: String, _ unit: String, _ help: String) -> Counter {
            prometheus.makeCounter(descriptor: MetricNameDescriptor(namespace: "imgw", metricName: name, unitName: unit, helpText: help))
        }
        let numbers = archive.statistics
        archiveGauges = [
            (gauge("archive_available", "", "1 while the message archive takes writes, 0 while chats are refused with STORE_UNAVAILABLE"),
             { @Sendable in archive.isAvailable ? 1 : 0 }),
            (gauge("archive_queued", "", "Chat messages waiting for the archive's next commit"), { @Sendable in Double(archive.queued) }),
        ]
        let gateway = statistics
        let pairs: [(String, String, String, @Sendable () -> Double)] = [
            ("archive_stored", "total", "Chat messages stored in the archive", { Double(numbers.stored.load(ordering: .relaxed)) }),
            ("archive_duplicates", "total", "Chat messages found stored already (resends)", { Double(numbers.duplicates.load(ordering: .relaxed)) }),
            ("archive_refused", "total", "Chat messages refused because the archive could not store them (STORE_UNAVAILABLE)",
             { Double(numbers.refused.load(ordering: .relaxed)) }),
            ("archive_commits", "total", "Archive transactions committed (group commit: several messages each)",
             { Double(numbers.commits.load(ordering: .relaxed)) }),
            ("archive_commit", "seconds_total", "Time spent committing to the archive", { Double(numbers.commitNanoseconds.load(ordering: .relaxed)) / 1e9 }),
            ("archive_failed_commits", "total", "Archive commits that failed or took longer than archive.write_timeout",
             { Double(numbers.failedCommits.load(ordering: .relaxed)) }),
            ("archive_read_failures", "total", "Archive reads (catching devices up) that failed or took too long",
             { Double(numbers.readFailures.load(ordering: .relaxed)) }),
            ("archive_deleted", "total", "Messages deleted by retention", { Double(numbers.deleted.load(ordering: .relaxed)) }),
            ("caught_up", "total", "Chat deliveries replayed from the archive to devices that had missed them",
             { Double(gateway.caughtUp.load(ordering: .relaxed)) }),
        ]
        archiveCounters = pairs.map { (counter($0.0, $0.1, $0.2), $0.3) }
        exported.withLock { $0 = Array(repeating: 0, count: pairs.count) }
    }

    func render() -> [UInt8] {
        connections.set(Double(statistics.connections.live))
        loggedIn.set(Double(statistics.loggedIn.load(ordering: .relaxed)))
        messagesIn.set(Double(statistics.messagesIn.load(ordering: .relaxed)))
        messagesOut.set(Double(statistics.messagesOut.load(ordering: .relaxed)))
        forgedMessages.set(Double(statistics.forgedMessages.load(ordering: .relaxed)))
        quotaDisconnects.set(Double(statistics.brokerQuotaDisconnects.load(ordering: .relaxed)))
        for (gauge, value) in push { gauge.set(Double(value())) }
        for (gauge, value) in archiveGauges { gauge.set(value()) }
        exported.withLock { exported in
            for (index, (counter, value)) in archiveCounters.enumerated() {
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
        let gauges = MetricsGauges(statistics: context.statistics, registry: context.registry, archive: context.archive)
        let router = Router(context: GatewayRequestContext.self)
        router.get("metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: gauges.render())))
        }
        return HTTPEndpoint(name: "metrics", host: host, port: port, router: router, logger: context.logger)
    }
}
