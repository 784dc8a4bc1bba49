import IMWire
import Logging
import Mosquitto

/// The MQTT v5 session of one logged-in device: client id derived from user and device,
/// clean start off, session expiry from the configuration, a retained "offline" presence
/// as its will, and manual acknowledgement (ack-through) so that a chat message the broker
/// handed over is only acknowledged once the device ACKed it.
final class DeviceSession: Sendable {
    let user: String
    let device: String
    /// LOGIN's RECEIPT_NOTICES: whether receipts on the user's receipts topic are forwarded
    /// to the device (they are acknowledged to the broker at once either way).
    let receiptNotices: Bool
    let client: MosquittoClient
    private let context: GatewayContext

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
        // The broker hands over at most this many QoS 1 messages the device has not ACKed.
        configuration.receiveMaximum = UInt16(clamping: max(1, context.configuration.limits.maxUnackedDeliveries))
        configuration.will = MosquittoClient.Will(
            topic: context.topics.presence(user: user, device: device),
            payload: PayloadCodec.encode(PresencePayload(status: .offline, device: device, ts: unixMilliseconds(), gateway: context.gatewayID)),
            qos: .atLeastOnce,
            retain: true,
            properties: Self.properties(sender: user))
        self.client = MosquittoClient(configuration: configuration, loop: context.mqttLoop)
    }

    /// JSON content type and the sender as a user property: what `mosquitto_sub -V 5`
    /// shows next to the payload.
    static func properties(sender: String, messageID: String? = nil, expiry: UInt32? = nil) -> MQTTProperties {
        var user = [UserProperty("sender", sender)]
        if let messageID { user.append(UserProperty("message-id", messageID)) }
        return MQTTProperties(userProperties: user, contentType: "application/json", messageExpiryInterval: expiry, payloadIsUTF8: true)
    }

    /// Connects (resuming the device's session if the broker kept it). Returns whether
    /// the broker resumed a stored session.
    ///
    /// With a resumed session, queued messages follow CONNACK at once and, under
    /// ack-through, hold everything this client queues until the device ACKs them: so
    /// deliveries must already flow to the device before `subscribeAndAnnounce()` is
    /// awaited.
    func connect() async throws -> Bool {
        try await context.connectGate.run { try await client.connect().sessionPresent }
    }

    /// Subscribes to the device's inbox and receipts and publishes "online" (retained).
    func subscribeAndAnnounce() async throws {
        let results = try await client.subscribe([
            .init(context.topics.inbox(user: user), qos: .atLeastOnce),
            .init(context.topics.receipts(user: user), qos: .atLeastOnce),
        ])
        for result in results {
            if case .rejected(let reason) = result {
                throw MosquittoError.subscriptionRejected(filter: context.topics.inbox(user: user), reason)
            }
        }
        try await publishPresence(.online)
    }

    func publishPresence(_ status: PresencePayload.Status) async throws {
        let payload = PresencePayload(status: status, device: device, ts: unixMilliseconds(), gateway: context.gatewayID)
        try await client.publish(
            topic: context.topics.presence(user: user, device: device), payload: PayloadCodec.encode(payload),
            qos: .atLeastOnce, retain: true, properties: Self.properties(sender: user))
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
        let topics = context.topics
        await client.deliverMessages { message in
            let kind = topics.classify(message.topic)
            mailbox.post(.message(message, kind))
            switch kind {
            case .inbox, .pubsub: return .later
            default: return .now
            }
        }
        await client.reportEvents { event in
            if case .disconnected(let reason) = event { mailbox.post(.lost(reason)) }
        }
    }

    /// A publish prepared off the MQTT loop (payload encoded, topic named), started on it.
    struct OutgoingPublish: Sendable {
        var topic: String
        var payload: [UInt8]
        var qos: QoS
        var properties: MQTTProperties

        /// Hands it to `client` (see ``MosquittoClient/startPublish(topic:payload:qos:retain:properties:completion:)``).
        func start(on client: isolated MosquittoClient, completion: @escaping @Sendable (Result<Void, MosquittoError>) -> Void) throws {
            try client.startPublish(topic: topic, payload: payload, qos: qos, properties: properties, completion: completion)
        }
    }

    /// A chat message for the recipient's inbox. The sender is always this session's user,
    /// whatever the frame claimed.
    func chatPublish(_ chat: ChatSend, serverTime: UInt64) -> OutgoingPublish {
        let payload = ChatPayload(send: chat, from: user, serverTime: serverTime)
        return OutgoingPublish(
            topic: context.topics.inbox(user: chat.to), payload: PayloadCodec.encode(payload),
            qos: chat.qos == .exactlyOnce ? .exactlyOnce : .atLeastOnce,
            properties: Self.properties(sender: user, messageID: chat.messageID))
    }

    /// One "delivered" receipt for `messageIDs` (at least one) of `sender`.
    func deliveredReceipt(to sender: String, messageIDs: [String]) -> OutgoingPublish {
        let payload = ReceiptPayload(kind: .delivered, ids: messageIDs, by: user, device: device, ts: unixMilliseconds())
        return OutgoingPublish(
            topic: context.topics.receipts(user: sender), payload: PayloadCodec.encode(payload),
            qos: .atLeastOnce, properties: Self.properties(sender: user, messageID: messageIDs[0]))
    }

    /// Publishes a read receipt to the original sender's receipts topic.
    func publishReadReceipt(_ receipt: ReadReceipt) async throws {
        try await publishReceipt(.read, to: receipt.to, messageID: receipt.messageID)
    }

    /// A receipt for `messageID`, sent by `to`: "read" when the device says so.
    func publishReceipt(_ kind: ReceiptPayload.Kind, to sender: String, messageID: String) async throws {
        let payload = ReceiptPayload(kind: kind, ids: [messageID], by: user, device: device, ts: unixMilliseconds())
        try await client.publish(
            topic: context.topics.receipts(user: sender), payload: PayloadCodec.encode(payload),
            qos: .atLeastOnce, properties: Self.properties(sender: user, messageID: messageID))
    }

    private var shareTopic: String { context.topics.location(user: user) + "/share" }

    /// Starts (or replaces) this user's location share: retained on the share topic with
    /// a message expiry of its duration, so every gateway knows who may watch.
    func publishShare(audience: [String], until: UInt64, duration: UInt32) async throws {
        let payload = LocationSharePayload(user: user, audience: audience, until: until)
        try await client.publish(
            topic: shareTopic, payload: PayloadCodec.encode(payload), qos: .atLeastOnce, retain: true,
            properties: Self.properties(sender: user, expiry: max(1, duration)))
    }

    /// Ends the share and clears the last known position.
    func clearShare() async throws {
        try await client.publish(topic: shareTopic, payload: [], qos: .atLeastOnce, retain: true)
        try await client.publish(topic: context.topics.location(user: user), payload: [], qos: .atLeastOnce, retain: true)
    }

    /// Publishes a position: QoS 0, retained as the last known position with a message
    /// expiry (the shorter of the configured retention and what is left of the share).
    func publishLocation(_ update: LocationUpdate, expiry: UInt32) async throws {
        let payload = LocationPayload(update: update, user: user, device: device)
        try await client.publish(
            topic: context.topics.location(user: user), payload: PayloadCodec.encode(payload), qos: .atMostOnce, retain: true,
            properties: Self.properties(sender: user, expiry: max(1, expiry)))
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
                try? await publishPresence(.offline)
            }
            // Aborts if deliveries are held (the will says "offline").
            try? await client.disconnect()
        case .loginTimeout, .loginFailed, .idleTimeout, .deliveryTimeout, .tokenExpired, .shutdown, .brokerLost, .connectionLost:
            // v5 DISCONNECT 0x04: the broker publishes the will now. With deliveries held,
            // the connection is dropped instead, which fires the will too.
            try? await client.disconnect(reason: .disconnectWithWill)
        case .takenOver:
            await client.abort()
        }
        await client.close()
    }
}
