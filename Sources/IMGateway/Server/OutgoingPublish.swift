import IMWire
import Logging
import Mosquitto

/// A publish prepared off the MQTT loop (payload encoded, topic named), to be started on it
/// or awaited.
struct OutgoingPublish: Sendable, Hashable {
    var topic: String
    var payload: [UInt8]
    var qos: QoS
    var retain: Bool = false
    var properties: MQTTProperties = MQTTProperties()

    /// Hands it to `client` when nobody waits for the outcome: a failure is logged as
    /// "`what` not published" with `metadata`.
    func startLogged(on client: isolated MosquittoClient, logger: ConnectionLogger, what: String, metadata: Logger.Metadata) {
        let failed: @Sendable (any Error) -> Void = { error in
            logger.notice("\(what) not published", metadata: metadata.merging(["error": "\(error)"]) { $1 })
        }
        do {
            try start(on: client) { if case .failure(let error) = $0 { failed(error) } }
        } catch {
            failed(error)
        }
    }

    /// Hands it to `client` (see ``MosquittoClient/startPublish(topic:payload:qos:retain:properties:completion:)``).
    func start(on client: isolated MosquittoClient, completion: @escaping @Sendable (Result<Void, MosquittoError>) -> Void) throws {
        try client.startPublish(topic: topic, payload: payload, qos: qos, retain: retain, properties: properties, completion: completion)
    }
}

/// Which copy of a chat message a publish is.
enum ChatCopy: Sendable, Hashable {
    /// The one-to-one recipient's.
    case recipient
    /// A group member's (not the sender's).
    case member(String)
    /// The sender's own inbox: a carbon for the sender's other devices.
    case carbon
}

extension OutgoingPublish {
    /// `chat` from `sender` into an inbox (`copy` says whose), as a gateway writes it
    /// (tagged). `sentByAPI` marks it for the recipient's gateway
    /// (``MessageAuthenticator/sentByAPI``).
    /// `stored`: the copy's place in the archive (its offset in the inbox user's stream, and
    /// the archive's epoch), which the recipient's gateway uses to deliver it once.
    static func chat(
        _ chat: ChatSend, from sender: String, serverTime: UInt64, topics: GatewayTopics, authenticator: MessageAuthenticator,
        sentByAPI: Bool = false, copy: ChatCopy = .recipient, stored: (offset: UInt64, epoch: UInt64)? = nil
    ) -> OutgoingPublish {
        var payload: ChatPayload
        let topic: String
        switch copy {
        case .recipient:
            payload = ChatPayload(send: chat, from: sender, serverTime: serverTime)
            topic = topics.inbox(user: chat.to)
        case .member(let member):
            payload = ChatPayload(send: chat, from: sender, serverTime: serverTime, to: member)
            topic = topics.inbox(user: member)
        case .carbon:
            payload = ChatPayload(send: chat, from: sender, serverTime: serverTime, to: chat.isGroup ? sender : chat.to, carbon: true)
            topic = topics.inbox(user: sender)
        }
        if let stored {
            payload.offset = stored.offset
            payload.epoch = stored.epoch
        }
        let bytes = PayloadCodec.encode(payload)
        var tag = authenticator.tag(topic: topic, payload: bytes)
        if sentByAPI { tag.append(MessageAuthenticator.sentByAPI) }
        return OutgoingPublish(
            topic: topic, payload: bytes,
            qos: chat.qos == .exactlyOnce ? .exactlyOnce : .atLeastOnce,
            properties: .gateway(sender: sender, messageID: chat.messageID, tag: tag))
    }
}

extension OutgoingPublish {
    /// Publishes `publishes` with `publish`, at most `window` waiting for the broker at once
    /// (libmosquitto keeps the rest in a list it searches at every acknowledgement); returns
    /// once the broker has every one, or throws the first failure.
    static func publishAll(
        _ publishes: [OutgoingPublish], window: Int, with publish: @escaping @Sendable (OutgoingPublish) async throws -> Void
    ) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            var next = publishes.makeIterator()
            var running = 0
            while running < window, let item = next.next() {
                group.addTask { try await publish(item) }
                running += 1
            }
            while try await group.next() != nil {
                if let item = next.next() { group.addTask { try await publish(item) } }
            }
        }
    }
}

extension MQTTProperties {
    /// What the gateway puts on its publishes: JSON content type and the sender (and
    /// message id) as user properties, what `mosquitto_sub -V 5` shows next to the payload.
    static func gateway(sender: String, messageID: String? = nil, expiry: UInt32? = nil, tag: [UInt8]? = nil) -> MQTTProperties {
        var user = [UserProperty("sender", sender)]
        if let messageID { user.append(UserProperty("message-id", messageID)) }
        return MQTTProperties(
            userProperties: user, contentType: "application/json", messageExpiryInterval: expiry, correlationData: tag, payloadIsUTF8: true)
    }
}

/// What one read burst (or mailbox batch) of a connection hands its MQTT session, in one
/// visit to the MQTT loop, in this order: acknowledgements of deliveries (under ack-through
/// they release the session's writes), "delivered" receipts, then answers to presence probes.
/// (Chats go their own way: ``ChatAcceptance``.)
struct UplinkBatch: Sendable {
    /// MQTT deliveries the device (or the gateway) is done with.
    var acknowledgements: [UInt64] = []
    /// "Delivered" receipts, one per sender, with the first message id (for the log).
    var receipts: [(publish: OutgoingPublish, messageID: String)] = []
    /// Answers to presence probes (QoS 0), started after the rest.
    var presenceAnswers: [OutgoingPublish] = []

    var isEmpty: Bool { acknowledgements.isEmpty && receipts.isEmpty && presenceAnswers.isEmpty }
}
