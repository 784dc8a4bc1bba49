import IMWire
import Logging
import Mosquitto

/// The MQTT side of one logged-in device, as ``DeviceConnection`` sees it: what it opens,
/// subscribes, publishes and ends. ``MosquittoDeviceSession`` is the one that talks to the
/// broker; the connection's unit tests put one of their own in its place
/// (``GatewayContext/makeSession``).
protocol DeviceSession: AnyObject, ChatRoute {
    /// The user (the token's `sub`).
    var user: String { get }
    /// The device id.
    var device: String { get }
    /// LOGIN's RECEIPT_NOTICES: whether receipts on the user's receipts topic are forwarded
    /// to the device (they are acknowledged to the broker at once either way).
    var receiptNotices: Bool { get }
    /// The topic layout.
    var topics: GatewayTopics { get }
    /// This gateway's id, in presence payloads.
    var gatewayID: String { get }
    /// When the session was made for the login, Unix milliseconds: the `ts` of its "online"
    /// presence (retained, and in answers to probes) and of its will.
    var loginTime: UInt64 { get }
    /// Signs what this session publishes for other gateways, checks what it receives.
    var authenticator: MessageAuthenticator { get }

    /// Hands received messages and the loss of the connection to `mailbox` (from the MQTT
    /// side's thread). Chat deliveries and pub/sub messages wait for the device's ACK
    /// (their acknowledgement is an ``UplinkBatch``'s); everything else is acknowledged at
    /// once.
    func attach(to mailbox: ConnectionMailbox) async
    /// Connects, resuming the device's session if the broker kept it; returns what CONNACK
    /// said (whether it did, what the broker offers). Gives up with
    /// ``DeviceConnection/LoginFailure/deviceGone`` instead of connecting once `deviceGone`
    /// says so (checked as late as it can be: after waiting its turn to connect).
    func connect(unless deviceGone: @escaping @Sendable () -> Bool) async throws -> MosquittoClient.ConnectResult
    /// Starts what `batch` holds in one visit to the MQTT side, in its order; a receipt that
    /// fails is logged to `logger`.
    func send(_ batch: UplinkBatch, logger: ConnectionLogger)
    /// Publishes and waits for the broker to take it.
    func publish(_ publish: OutgoingPublish) async throws
    /// Hands `publish` to the MQTT client without waiting for it to be written or taken.
    func enqueue(_ publish: OutgoingPublish) async throws
    /// Publishes `publishes` in order, at most `window` waiting for the broker at once;
    /// returns once the broker has every one, or throws the first failure.
    func publishAll(_ publishes: [OutgoingPublish], window: Int) async throws
    /// Subscribes; one result per filter.
    func subscribe(_ subscriptions: [MosquittoClient.Subscription]) async throws -> [MosquittoClient.SubscriptionResult]
    /// Unsubscribes.
    func unsubscribe(_ filters: [String]) async throws
    /// Ends the MQTT side the way `reason` says, in bounded time, and releases it.
    func end(_ reason: ConnectionStateMachine.CloseReason) async
}

extension DeviceSession {
    /// Subscribes to the device's inbox (No Local: the carbons this session publishes there are
    /// for the user's other devices), receipts, typing signals and the presence of the user's
    /// own devices (whether there is another to send carbons to), and publishes "online"
    /// (retained). With `probeOwnDevices`, it then asks the user's other online devices for
    /// their presence (``presenceProbes(_:)``): on a cluster whose nodes keep retained
    /// messages apart, theirs may not reach this subscription.
    ///
    /// "Online" goes first: once subscribed, a QoS 1 message that arrives holds the session's
    /// writes (ack-through: its PUBACK waits for the device's ACK, which comes after LOGIN_OK,
    /// which waits for this), so a publish awaited after subscribing could wait for ever. The
    /// probe, whose answers come on the signal topic, follows the subscriptions unawaited.
    func subscribeAndAnnounce(probeOwnDevices: Bool) async throws {
        try await publish(presence(.online))
        let results = try await subscribe([
            .init(topics.inbox(user: user), qos: .atLeastOnce, options: SubscribeOptions(noLocal: true)),
            .init(topics.receipts(user: user), qos: .atLeastOnce),
            .init(topics.signal(user: user), qos: .atMostOnce, options: SubscribeOptions(noLocal: true)),
            .init(topics.presenceFilter(user: user), qos: .atMostOnce),
        ])
        for result in results {
            if case .rejected(let reason) = result {
                throw MosquittoError.subscriptionRejected(filter: topics.inbox(user: user), reason)
            }
        }
        if probeOwnDevices { try await enqueue(presenceProbes([user])[0]) }
    }

    /// This device's presence: "online" carries the login time, "offline" the time now.
    func presencePayload(_ status: PresencePayload.Status) -> PresencePayload {
        PresencePayload(status: status, device: device, ts: status == .online ? loginTime : unixMilliseconds(), gateway: gatewayID)
    }

    /// This device's retained presence.
    func presence(_ status: PresencePayload.Status) -> OutgoingPublish {
        OutgoingPublish(
            topic: topics.presence(user: user, device: device), payload: PayloadCodec.encode(presencePayload(status)),
            qos: .atLeastOnce, retain: true, properties: .gateway(sender: user))
    }

    /// A ``PresenceProbePayload`` to each of `users`' online devices (on the user's signal
    /// topic, QoS 0, expiring after ``presenceProbeExpiry``): each answers this device
    /// (``presenceAnswer(to:)``).
    func presenceProbes(_ users: [String]) -> [OutgoingPublish] {
        let bytes = PayloadCodec.encode(PresenceProbePayload(from: user, device: device))
        return users.map { signal(to: $0, bytes) }
    }

    /// This device's "online" for the device that sent `probe`, on its user's signal topic.
    func presenceAnswer(to probe: PresenceProbePayload) -> OutgoingPublish {
        signal(to: probe.from, PayloadCodec.encode(PresenceAnswerPayload(presence: presencePayload(.online), user: user, to: probe.device)))
    }

    /// How long a probe or an answer may wait in the broker, in seconds: both are for devices
    /// online now.
    static var presenceProbeExpiry: UInt32 { 10 }

    private func signal(to recipient: String, _ bytes: [UInt8]) -> OutgoingPublish {
        let topic = topics.signal(user: recipient)
        return OutgoingPublish(
            topic: topic, payload: bytes, qos: .atMostOnce,
            properties: .gateway(sender: user, expiry: Self.presenceProbeExpiry, tag: authenticator.tag(topic: topic, payload: bytes)))
    }

    /// A chat message for the recipient's inbox. The sender is always this session's user,
    /// whatever the frame claimed. `stored`: the copy's offset in the archive, and its epoch.
    func chatPublish(
        _ chat: ChatSend, serverTime: UInt64, copy: ChatCopy = .recipient, stored: (offset: UInt64, epoch: UInt64)? = nil
    ) -> OutgoingPublish {
        .chat(chat, from: user, serverTime: serverTime, topics: topics, authenticator: authenticator, copy: copy, stored: stored)
    }

    /// One receipt of `kind` for `messageIDs` (at least one) of `sender`.
    func receipt(_ kind: ReceiptPayload.Kind, to sender: String, messageIDs: [String]) -> OutgoingPublish {
        let payload = ReceiptPayload(kind: kind, ids: messageIDs, by: user, device: device, ts: unixMilliseconds())
        let topic = topics.receipts(user: sender)
        let bytes = PayloadCodec.encode(payload)
        return OutgoingPublish(
            topic: topic, payload: bytes,
            qos: .atLeastOnce, properties: .gateway(sender: user, messageID: messageIDs[0], tag: authenticator.tag(topic: topic, payload: bytes)))
    }

    private var shareTopic: String { topics.location(user: user) + "/share" }

    /// Starts (or replaces) this user's location share: retained on the share topic with
    /// a message expiry of its duration, so every gateway knows who may watch.
    func publishShare(audience: [String], until: UInt64, duration: UInt32) async throws {
        let payload = LocationSharePayload(user: user, audience: audience, until: until)
        let bytes = PayloadCodec.encode(payload)
        try await publish(OutgoingPublish(
            topic: shareTopic, payload: bytes, qos: .atLeastOnce, retain: true,
            properties: .gateway(sender: user, expiry: max(1, duration), tag: authenticator.tag(topic: shareTopic, payload: bytes))))
    }

    /// Ends the share and clears the last known position.
    func clearShare() async throws {
        try await publish(OutgoingPublish(topic: shareTopic, payload: [], qos: .atLeastOnce, retain: true))
        try await publish(OutgoingPublish(topic: topics.location(user: user), payload: [], qos: .atLeastOnce, retain: true))
    }

    /// Publishes a position: QoS 0, retained as the last known position with a message
    /// expiry (the shorter of the configured retention and what is left of the share).
    func publishLocation(_ update: LocationUpdate, expiry: UInt32) async throws {
        let payload = LocationPayload(update: update, user: user, device: device)
        let topic = topics.location(user: user)
        let bytes = PayloadCodec.encode(payload)
        try await publish(OutgoingPublish(
            topic: topic, payload: bytes, qos: .atMostOnce, retain: true,
            properties: .gateway(sender: user, expiry: max(1, expiry), tag: authenticator.tag(topic: topic, payload: bytes))))
    }
}
