import AsyncHTTPClient
import Foundation
import IMWire
import Logging
import Mosquitto
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// The offline-push webhook of one gateway (`push.url`), run by ``run()`` next to the
/// listener. The gateway that accepts a chat (from a device or the server API) hands it to
/// ``chatAccepted(_:)``, so each chat is looked at by exactly one gateway and costs the broker
/// nothing more. Whether the recipient is online comes from every device's presence, which
/// the notifier's MQTT client follows (`{prefix}/u/+/presence/+`, QoS 0 so that the broker's
/// queue limit cannot cut the retained presence short). A chat for a user with no device
/// online becomes a ``PushNotification`` POSTed with AsyncHTTPClient, signed
/// (``PushSignature``); ``PushQueue`` decides when, whether and how often.
final class PushNotifier: Sendable {
    private enum Command: Sendable {
        case post(PushQueue.Attempt)
        case wakeUp(at: Double)
    }

    /// `push`, as configured.
    let settings: GatewayConfiguration.PushSettings
    private let url: String
    private let signature: PushSignature
    private let topics: GatewayTopics
    private let statistics: PushStatistics
    private let logger: Logger
    private let client: MosquittoClient
    /// AsyncHTTPClient's settings; ``run()`` makes the client (and shuts it down).
    private let http: HTTPClient.Configuration
    private let markerTopic: String
    private let queue: Mutex<PushQueue>
    /// Which subscription the marker in flight completes.
    private let generation = Atomic<UInt64>(0)
    private let commands: AsyncStream<Command>
    private let commandSink: AsyncStream<Command>.Continuation
    private static let clockOrigin = ContinuousClock.now

    /// A notifier for `configuration`'s `push` settings, which must have a URL; its MQTT
    /// client connects to `broker` on `loop`.
    init(configuration: GatewayConfiguration, broker: BrokerEndpoint, loop: MosquittoEventLoop, statistics: PushStatistics, logger: Logger) {
        let settings = configuration.push
        self.settings = settings
        url = settings.url ?? ""
        signature = PushSignature(secret: settings.secret)
        topics = configuration.topics
        self.statistics = statistics
        self.logger = logger
        let clientID = GatewayTopics.gatewayClientID("push", gatewayID: configuration.gatewayID)
        var mqtt = broker.clientConfiguration(clientID: clientID)
        mqtt.keepalive = 60
        client = MosquittoClient(configuration: mqtt, loop: loop)
        markerTopic = topics.marker(clientID: clientID)
        queue = Mutex(PushQueue(settings: PushQueue.Settings(settings)))
        (commands, commandSink) = AsyncStream.makeStream(of: Command.self)

        var http = HTTPClient.Configuration()
        http.timeout = HTTPClient.Configuration.Timeout(connect: .seconds(Int64(min(settings.timeout, 5))), read: .seconds(Int64(settings.timeout)))
        http.redirectConfiguration = .disallow
        // The only hook AsyncHTTPClient has into its connections: each socket is marked
        // close-on-exec as soon as it is connected.
        let markCloseOnExec: @Sendable (any Channel) -> EventLoopFuture<Void> = { channel in
            channel.eventLoop.makeCompletedFuture { CloseOnExec.mark(channel) }.map { _ in }
        }
        http.http1_1ConnectionDebugInitializer = markCloseOnExec
        http.http2ConnectionDebugInitializer = markCloseOnExec
        self.http = http
    }

    /// Whether a notification may be due for a chat to `user`: false while a device of his is
    /// online, so that the chat path builds no notification for him.
    func mayNotify(_ user: String) -> Bool {
        queue.withLock { !$0.presence.isOnline(user) }
    }

    /// The broker has `chat` from `sender`, accepted by this gateway at `serverTime`: a
    /// notification for each of `recipients` (the one-to-one recipient, or the group's other
    /// members) who has no device online (``chatAccepted(_:)``).
    func chatAccepted(_ chat: ChatSend, from sender: String, serverTime: UInt64, recipients: [String]) {
        for recipient in recipients where mayNotify(recipient) {
            chatAccepted(PushNotification(send: chat, from: sender, serverTime: serverTime, settings: settings, to: recipient))
        }
    }

    /// The broker has a chat this gateway accepted: its notification goes out after
    /// `push.delay_ms` unless a device of the recipient is online by then.
    func chatAccepted(_ notification: PushNotification) {
        let offer = queue.withLock { $0.offer(notification, now: Self.now()) }
        switch offer {
        case .queued:
            pump()
        case .duplicate:
            break
        case .full:
            let dropped = statistics.dropped.add(1, ordering: .relaxed).newValue
            if dropped.nonzeroBitCount == 1 {
                logger.warning(
                    "offline push: the queue is full, a notification was dropped",
                    metadata: ["to": "\(notification.to)", "id": "\(notification.id)", "queue": "\(settings.queue)", "dropped": "\(dropped)"])
            }
        }
    }

    /// Keeps the MQTT client subscribed and sends notifications until cancelled; then stops
    /// (POSTs under way are cancelled) and logs what was left unsent.
    func run() async {
        let topics = self.topics
        let http = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: self.http, backgroundActivityLogger: logger)
        await withDiscardingTaskGroup { group in
            // On the MQTT loop thread, as messages arrive: a lookup and a lock each.
            await client.deliverMessages { message in
                self.receive(message)
                return .now
            }
            group.addTask {
                await self.client.keepSubscribed(
                    [.init(topics.everyPresenceFilter, qos: .atMostOnce), .init(self.markerTopic, qos: .atLeastOnce)],
                    checkingEvery: .seconds(1), logger: self.logger, problem: "the offline-push client is not connected",
                    subscribed: { await self.subscribed($0) })
            }
            for await command in commands {
                switch command {
                case .post(let attempt):
                    group.addTask { await self.post(attempt, with: http) }
                case .wakeUp(let time):
                    group.addTask {
                        try? await Task.sleep(until: Self.clockOrigin + .seconds(time), clock: .continuous)
                        guard !Task.isCancelled else { return }
                        self.queue.withLock { $0.wokeUp(at: time) }
                        self.pump()
                    }
                }
            }
            group.cancelAll()
        }
        try? await http.shutdown()
        let left = queue.withLock { $0.count }
        if left > 0 { logger.warning("offline-push notifications not sent: the gateway stopped", metadata: ["notifications": "\(left)"]) }
    }

    /// Seconds on the monotonic clock the queue runs on.
    private static func now() -> Double {
        let elapsed = ContinuousClock.now - clockOrigin
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    /// After each (re)subscription: nothing goes out until the retained presence of every
    /// device has arrived, which the marker published now shows (it comes back after them).
    /// Without the presence, nothing can work: no marker, no "ready".
    private func subscribed(_ results: [MosquittoClient.SubscriptionResult]) async {
        queue.withLock { $0.presenceComplete(false) }
        guard case .granted = results.first else {
            logger.error(
                "offline push is off: the broker refused the presence subscription; let the gateway's account subscribe to it",
                metadata: ["filter": "\(topics.everyPresenceFilter)"])
            return
        }
        let marker = generation.add(1, ordering: .relaxed).newValue
        do {
            try await client.publish(topic: markerTopic, payload: Array(String(marker).utf8), qos: .atLeastOnce)
        } catch {
            logger.warning("the offline-push client cannot publish its marker", metadata: ["error": "\(error)"])
        }
    }

    private func receive(_ message: MosquittoMessage) {
        if message.topic == markerTopic {
            guard UInt64(message.payloadString) == generation.load(ordering: .relaxed) else { return }
            let online = queue.withLock { queue in
                queue.presenceComplete(true)
                return queue.presence.count
            }
            logger.info("offline push ready: following presence", metadata: ["online-users": "\(online)", "url": "\(url)"])
            pump()
            return
        }
        guard case .presence(let user, let device)? = topics.classify(message.topic) else { return }
        let online = message.payload.isEmpty ? false : (try? PayloadCodec.decode(PresencePayload.self, from: message.payload))?.status == .online
        queue.withLock { $0.presence(user: user, device: device, online: online) }
    }

    /// Starts what is due and arms the timer for what comes next.
    private func pump() {
        let now = Self.now()
        let (steps, wakeUp, count) = queue.withLock { queue in (queue.takeDue(now: now), queue.nextWakeUp(now: now), queue.count) }
        statistics.queued.store(count, ordering: .relaxed)
        for step in steps {
            switch step {
            case .post(let attempt):
                commandSink.yield(.post(attempt))
            case .suppressed(let notification):
                statistics.suppressed.add(1, ordering: .relaxed)
                logger.debug("offline push: the recipient is online", metadata: ["to": "\(notification.to)", "id": "\(notification.id)"])
            }
        }
        if let wakeUp { commandSink.yield(.wakeUp(at: wakeUp)) }
    }

    private func post(_ attempt: PushQueue.Attempt, with http: HTTPClient) async {
        let outcome = await send(attempt, with: http)
        let finish = queue.withLock { $0.finished(attempt, outcome, now: Self.now()) }
        let metadata: Logger.Metadata = [
            "to": "\(attempt.notification.to)", "from": "\(attempt.notification.from)", "id": "\(attempt.notification.id)",
            "attempt": "\(attempt.number)",
        ]
        switch finish {
        case .delivered:
            statistics.delivered.add(1, ordering: .relaxed)
        case .retry(let time):
            let retries = statistics.retries.add(1, ordering: .relaxed).newValue
            if retries.nonzeroBitCount == 1, case .failed(let reason, _) = outcome {
                logger.warning(
                    "offline push: the webhook failed, retrying",
                    metadata: metadata.merging(["reason": "\(reason)", "retry-in": "\(Int(time - Self.now() + 0.5)) s", "retries": "\(retries)"]) { $1 })
            }
        case .gaveUp(let reason):
            let failed = statistics.failed.add(1, ordering: .relaxed).newValue
            if failed.nonzeroBitCount == 1 {
                logger.error("offline push: gave a notification up", metadata: metadata.merging(["reason": "\(reason)", "failed": "\(failed)"]) { $1 })
            }
        }
        pump()
    }

    /// One POST: delivered for a 2xx answer; a time-out, a connection error, 408, 429 and
    /// 5xx may pass at a retry, other answers will not.
    private func send(_ attempt: PushQueue.Attempt, with http: HTTPClient) async -> PushQueue.Outcome {
        let body = attempt.notification.body
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "imgw/\(IMGatewayInfo.version)")
        request.headers.add(name: PushSignature.header, value: signature.value(body: body, time: Int64(Date.now.timeIntervalSince1970)))
        request.headers.add(name: "X-IMGW-Attempt", value: "\(attempt.number)")
        request.body = .bytes(ByteBuffer(bytes: body))
        do {
            let response = try await http.execute(request, timeout: .seconds(Int64(settings.timeout)))
            // Read (and drop) the answer so that the connection can serve the next POST.
            _ = try? await response.body.collect(upTo: 64 * 1024)
            let code = response.status.code
            switch code {
            case 200..<300: return .delivered
            case 408, 429, 500..<600: return .failed(reason: "HTTP \(code)", retryable: true)
            default: return .failed(reason: "HTTP \(code)", retryable: false)
            }
        } catch {
            return .failed(reason: "\(error)", retryable: !(error is CancellationError))
        }
    }
}
