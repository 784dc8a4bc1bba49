import IMWire
import Logging
import Mosquitto
import Synchronization

/// The MQTT v5 session of one logged-in device on the broker: client id derived from user
/// and device, clean start off, session expiry from the configuration, a retained
/// "offline" presence as its will, and manual acknowledgement (ack-through) so that a chat
/// message the broker handed over is only acknowledged once the device ACKed it.
final class MosquittoDeviceSession: DeviceSession {
    let user: String
    let device: String
    let receiptNotices: Bool
    let loginTime = unixMilliseconds()
    let client: MosquittoClient
    /// The gateway's shared parts (one reference per session, not copies: a session is
    /// kept for every logged-in device).
    private let context: GatewayContext

    var topics: GatewayTopics { context.topics }
    var gatewayID: String { context.gatewayID }
    var authenticator: MessageAuthenticator { context.authenticator }

    init(user: String, device: String, receiptNotices: Bool = true, context: GatewayContext) {
        self.user = user
        self.device = device
        self.receiptNotices = receiptNotices
        self.context = context
        let broker = context.configuration.broker
        var configuration = context.broker.clientConfiguration(clientID: context.topics.mqttClientID(user: user, device: device))
        configuration.cleanStart = false
        configuration.sessionExpiryInterval = UInt32(clamping: broker.sessionExpiry)
        configuration.keepalive = broker.keepalive
        configuration.maxInflightPublishes = broker.maxInflight
        configuration.acknowledgement = .manual
        // A device session is never connected again (a lost one ends its connection, a login
        // that tries again makes a new one): what waits for the broker fails with the loss,
        // instead of waiting for the session's end (a login announcing presence when the
        // broker took the session over waited for its deadline).
        configuration.failsPublishesOnLoss = true
        // For the same reason it needs its will no more once the broker has it.
        configuration.forgetsWillOnceConnected = true
        // The gateway reads payloads, topics and the correlation data (the gateways' tag,
        // MessageAuthenticator) only.
        configuration.receivesProperties = false
        configuration.receivesCorrelationData = true
        // The broker hands over at most this many QoS 1 messages the device has not ACKed.
        configuration.receiveMaximum = UInt16(clamping: max(1, context.configuration.limits.maxUnackedDeliveries))
        configuration.will = MosquittoClient.Will(
            topic: context.topics.presence(user: user, device: device),
            payload: PayloadCodec.encode(PresencePayload(status: .offline, device: device, ts: loginTime, gateway: context.gatewayID)),
            qos: .atLeastOnce,
            retain: true,
            properties: .gateway(sender: user))
        // Its messages and events go to the connection's mailbox (attach(to:), before connecting).
        self.client = MosquittoClient(configuration: configuration, loop: context.mqttLoop, streams: false)
    }

    /// Connects (resuming the device's session if the broker kept it). Returns whether
    /// the broker resumed a stored session.
    ///
    /// With a resumed session, queued messages follow CONNACK at once and, under
    /// ack-through, hold everything this client queues until the device ACKs them: so
    /// deliveries must already flow to the device before `subscribeAndAnnounce(probeOwnDevices:)` is
    /// awaited.
    func connect(unless deviceGone: @escaping @Sendable () -> Bool) async throws -> MosquittoClient.ConnectResult {
        try await context.connectGate.run {
            // Its turn may come long after the device left (a login storm).
            if deviceGone() { throw DeviceConnection.LoginFailure.deviceGone }
            return try await client.connect()
        }
    }

    /// Hands received messages and the loss of the connection to `mailbox` (on the MQTT
    /// loop's thread) instead of the client's streams.
    ///
    /// Only chat deliveries and pub/sub messages wait for the device's ACK (ack-through);
    /// everything else is acknowledged at once, on the MQTT loop: a receipt or presence
    /// notice held until the event loop got to it would hold the session's own chat
    /// publishes behind it for two thread hops. (A receipt lost in a crash costs little:
    /// the device's later ACK of it is accepted and ignored.)
    func attach(to mailbox: ConnectionMailbox) async {
        let topics = self.topics
        let context = self.context
        let user = self.user
        await client.deliverMessages { message in
            let kind = topics.classify(message.topic)
            switch kind {
            case .location(let sharer):
                // Checked at each position: a stopped or expired share (or one whose audience
                // changed) stops the stream at once.
                guard context.isFromAGateway(message), context.shares.canWatch(watcher: user, sharer: sharer) else { return .now }
            case .inbox, .receipts, .signal:
                guard context.isFromAGateway(message) else { return .now }
            default:
                break
            }
            mailbox.post(.message(message, kind))
            switch kind {
            case .inbox, .pubsub: return .later
            default: return .now
            }
        }
        let id = ObjectIdentifier(self)
        await client.reportEvents { event in
            if case .disconnected(let reason) = event { mailbox.post(.lost(reason, session: id)) }
        }
    }

    func send(_ batch: UplinkBatch, logger: ConnectionLogger) {
        client.perform { client in
            if !batch.acknowledgements.isEmpty { client.acknowledge(deliveryIDs: batch.acknowledgements) }
            for (receipt, messageID) in batch.receipts {
                receipt.startLogged(on: client, logger: logger, what: "delivered receipt", metadata: ["message-id": "\(messageID)"])
            }
            for answer in batch.presenceAnswers {
                answer.startLogged(on: client, logger: logger, what: "presence answer", metadata: ["topic": "\(answer.topic)"])
            }
        }
    }

    /// A chat's publishes, handed over and waiting for the MQTT loop.
    private struct ChatPublishes {
        var publishes: [OutgoingPublish]
        var window: Int
        var completion: @Sendable ([(any Error)?]) -> Void
    }

    /// The chats handed over since the last visit to the MQTT loop, and whether one is on its
    /// way: a burst of chats (a read of the device's socket, an archive commit) costs one
    /// visit, not one each.
    private let chatOutbox = Mutex<(waiting: [ChatPublishes], scheduled: Bool)>(([], false))

    /// One copy published: no allocation for the common outcome.
    private static let oneSucceeded: [(any Error)?] = [nil]

    func publishChat(_ publishes: [OutgoingPublish], window: Int, completion: @escaping @Sendable ([(any Error)?]) -> Void) {
        let schedule = chatOutbox.withLock { outbox in
            outbox.waiting.append(ChatPublishes(publishes: publishes, window: window, completion: completion))
            defer { outbox.scheduled = true }
            return !outbox.scheduled
        }
        guard schedule else { return }
        client.perform { [self] client in
            let chats = chatOutbox.withLock { outbox -> [ChatPublishes] in
                outbox.scheduled = false
                defer { outbox.waiting = [] }
                return outbox.waiting
            }
            for chat in chats { Self.start(chat, on: client) }
        }
    }

    /// Starts `chat`'s publishes (on the loop).
    private static func start(_ chat: ChatPublishes, on client: isolated MosquittoClient) {
        let completion = chat.completion
        guard chat.publishes.count == 1 else {
            return WindowedPublish.start(chat.publishes, window: chat.window, onLoopOf: client) { completion($0.map { $0 }) }
        }
        // A one-to-one chat without a carbon: the common case, without a window to keep.
        do {
            try chat.publishes[0].start(on: client) { outcome in
                if case .failure(let error) = outcome { completion([error]) } else { completion(oneSucceeded) }
            }
        } catch {
            completion([error])
        }
    }

    func publish(_ publish: OutgoingPublish) async throws {
        try await client.publish(
            topic: publish.topic, payload: publish.payload, qos: publish.qos, retain: publish.retain, properties: publish.properties)
    }

    func enqueue(_ publish: OutgoingPublish) async throws {
        // With a completion nobody keeps the outcome: a ticket never collected would keep it
        // for the session's life.
        try await client.startPublish(
            topic: publish.topic, payload: publish.payload, qos: publish.qos, retain: publish.retain, properties: publish.properties,
            completion: { _ in })
    }

    func publishAll(_ publishes: [OutgoingPublish], window: Int) async throws {
        try await WindowedPublish.run(publishes, window: window, on: client)
    }

    func subscribe(_ subscriptions: [MosquittoClient.Subscription]) async throws -> [MosquittoClient.SubscriptionResult] {
        try await client.subscribe(subscriptions)
    }

    func unsubscribe(_ filters: [String]) async throws {
        try await client.unsubscribe(filters)
    }

    /// How long ending a session may wait for the broker (the "offline" presence, the
    /// DISCONNECT) before the connection is dropped anyway.
    static let endGrace: Duration = .seconds(2)

    /// Ends the MQTT side and releases the client, in bounded time.
    ///
    /// It never waits on what the session itself holds back: with deliveries the device
    /// has not ACKed, their PUBACKs are held (ack-through) and would have to leave before
    /// anything this client sends, so the connection is dropped instead. The broker then
    /// publishes the will (a retained "offline" presence) and redelivers those messages at
    /// the device's next login. And it never waits on the broker for more than
    /// ``endGrace``: past it the connection is dropped the same way.
    ///
    /// How, by why the connection ended: after LOGOUT, "offline" is published and the
    /// session disconnects normally (no will); after a takeover it is left to the new
    /// connection quietly; in every other case (a drop, a deadline, shutdown, the token) it
    /// disconnects with the will, and deliveries the device did not ACK stay with the
    /// broker, which redelivers them at the next login.
    func end(_ reason: ConnectionStateMachine.CloseReason) async {
        let client = self.client
        let deadline = Task {
            try await Task.sleep(for: Self.endGrace)
            await client.abort()
            // Fails whatever still waits for the broker (the presence publish).
            await client.close()
        }
        defer { deadline.cancel() }
        switch reason {
        case .logout:
            // A new delivery can arrive while this runs: its PUBACK is then held behind
            // this publish, which has already been written (the loop writes what a call
            // queued before it reads again).
            if await client.unacknowledgedCount == 0 {
                try? await publish(presence(.offline))
            }
            // Aborts if deliveries are held (the will says "offline").
            try? await client.disconnect()
        case .loginTimeout, .loginFailed, .idleTimeout, .deliveryTimeout, .tokenExpired, .disconnected, .shutdown, .brokerLost, .connectionLost:
            // v5 DISCONNECT 0x04: the broker publishes the will now. With deliveries held,
            // the connection is dropped instead, which fires the will too.
            try? await client.disconnect(reason: .disconnectWithWill)
        case .takenOver:
            await client.abort()
        }
        await client.close()
    }
}
