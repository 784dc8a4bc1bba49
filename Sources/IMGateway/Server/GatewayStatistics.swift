import AsyncToolkit
import NIOCore
import Synchronization

/// Counters for the stats topic and metrics.
final class GatewayStatistics: Sendable {
    /// When the gateway started.
    let started = ContinuousClock.now
    /// Open TLV connections, counted until their MQTT session has ended too (shutdown
    /// waits for the last one: ``AsyncCondition/waitUntilZero()``).
    let connections = AsyncCondition(0)
    /// Chat messages refused RATE_LIMITED (``GatewayConfiguration/LimitSettings/chatRate``).
    let chatRateLimited = Atomic<Int>(0)
    /// Chat deliveries replayed from the archive (catching devices up).
    let caughtUp = Atomic<Int>(0)
    /// Messages dropped because no gateway wrote them (``GatewayContext/isFromAGateway(_:)``).
    let forgedMessages = Atomic<Int>(0)
    /// Device sessions the broker ended because their queue was full (DISCONNECT 0x97 Quota
    /// exceeded: ejabberd's max_queue); what it held for the device is lost.
    let brokerQuotaDisconnects = Atomic<Int>(0)
    /// The offline-push webhook's counters.
    let push = PushStatistics()
    /// Chat messages accepted from the server API.
    let apiMessagesIn = Atomic<Int>(0)
    private let tcp = TransportCounters()
    private let websocket = TransportCounters()

    /// The counts of `transport`'s devices.
    func transport(_ transport: DeviceTransport) -> TransportCounters {
        switch transport {
        case .tcp: tcp
        case .websocket: websocket
        }
    }

    /// Logged-in devices, every transport.
    var loggedIn: Int { sum { $0.loggedIn.load(ordering: .relaxed) } }
    /// Chat messages accepted from devices and the server API.
    var messagesIn: Int { sum { $0.messagesIn.load(ordering: .relaxed) } + apiMessagesIn.load(ordering: .relaxed) }
    /// Messages written to devices.
    var messagesOut: Int { sum { $0.messagesOut.load(ordering: .relaxed) } }

    private func sum(_ count: (TransportCounters) -> Int) -> Int {
        count(tcp) + count(websocket)
    }

    /// The chat path's latencies of the last ten seconds: from a chat taken from a device to
    /// its ACK (stored, published, the broker's PUBACK).
    private let chatLatency = Mutex(LatencyWindow())

    /// A chat taken at `start` was ACKed at `now`.
    func chatAcknowledged(since start: NIODeadline, now: NIODeadline) {
        let microseconds = UInt64(max(0, (now - start).nanoseconds / 1000))
        let second = Int64(now.uptimeNanoseconds / 1_000_000_000)
        chatLatency.withLock { $0.record(microseconds: microseconds, second: second) }
    }

    /// The p99 of the chat path over the last ten seconds, in milliseconds; nil without a chat.
    func chatLatencyP99() -> Double? {
        let second = Int64(NIODeadline.now().uptimeNanoseconds / 1_000_000_000)
        return chatLatency.withLock { $0.percentile(0.99, second: second) }.map { Double($0) / 1000 }
    }
}

/// The offline-push webhook's counters (``PushNotifier``).
final class PushStatistics: Sendable {
    /// Notifications waiting or in flight.
    let queued = Atomic<Int>(0)
    /// Notifications the webhook answered with 2xx.
    let delivered = Atomic<Int>(0)
    /// Notifications queued and then not sent because a device of the recipient had come
    /// online (a chat for a user online when it is accepted makes no notification at all).
    let suppressed = Atomic<Int>(0)
    /// POSTs that failed and will be made again.
    let retries = Atomic<Int>(0)
    /// Notifications given up: out of attempts, or refused by the webhook.
    let failed = Atomic<Int>(0)
    /// Notifications dropped because the queue was full.
    let dropped = Atomic<Int>(0)
}

/// The counts of one transport's devices (``GatewayStatistics/transport(_:)``), for the
/// metrics' `transport` label: their sums are the gateway's totals.
final class TransportCounters: Sendable {
    /// Open connections, counted until their MQTT session has ended too.
    let connections = Atomic<Int>(0)
    /// Logged-in devices.
    let loggedIn = Atomic<Int>(0)
    /// Logins (LOGIN_OK sent) since start.
    let logins = Atomic<Int>(0)
    /// Chat messages accepted from these devices.
    let messagesIn = Atomic<Int>(0)
    /// Messages written to these devices.
    let messagesOut = Atomic<Int>(0)
}
