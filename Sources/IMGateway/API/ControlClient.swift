import AsyncToolkit
import Foundation
import Logging
import Mosquitto

/// The gateway's control client, one per gateway, kept connected by ``run()``. It follows
/// what the app's backend asked any gateway for: disconnects (`{prefix}/$ctl/disconnect`),
/// which end the named sessions held here with KICK DISCONNECTED, and token revocations (the
/// retained `{prefix}/u/+/revoked`), which ``TokenRevocations`` applies at LOGIN and
/// TOKEN_REFRESH and which also end the sessions here that logged in with an older token.
/// Both are taken only from a gateway (``MessageAuthenticator``). For the server API it
/// publishes, and reads retained state (presence) for lookups.
///
/// A lookup subscribes to the filter, then publishes a marker to a topic only this client
/// reads. The broker queues a subscription's retained messages before it handles the marker
/// publish that came after it, so once the marker is back, every retained message of the
/// filter has arrived.
final class ControlClient: ChatRoute {
    /// Why a request to the broker failed: the API answers 503 for each.
    enum Failure: Error, CustomStringConvertible {
        case notConnected
        case noAnswer(seconds: Double)

        var description: String {
            switch self {
            case .notConnected: "not connected to the broker"
            case .noAnswer(let seconds): "no answer from the broker within \(seconds) s"
            }
        }
    }

    private let client: MosquittoClient
    private let markerTopic: String
    private let context: GatewayContext
    private let logger: Logger
    /// Lookups under way; each waits here for its marker.
    private let lookups = AsyncCondition(Lookups())
    /// Counts the connections whose subscriptions were made (0: none yet); requests wait here
    /// for the next one.
    private let subscribedConnections = AsyncCondition<UInt64>(0)
    /// How long a lookup waits for its marker.
    private let timeout: Double

    private struct Lookups: Sendable {
        var nextID: UInt64 = 0
        var pending: [UInt64: Pending] = [:]
        /// Lookups per filter, so that a filter stays subscribed while one still uses it.
        var users: [String: Int] = [:]
    }

    private struct Pending: Sendable {
        let filter: String
        let matches: @Sendable (String) -> Bool
        var messages: [MosquittoMessage] = []
        /// Set when its marker came back, or the connection was lost.
        var outcome: Result<Void, Failure>?
    }

    init(context: GatewayContext, timeout: Double = 5) {
        let clientID = GatewayTopics.gatewayClientID("ctl", gatewayID: context.gatewayID)
        var configuration = context.broker.clientConfiguration(clientID: clientID)
        configuration.keepalive = 60
        client = MosquittoClient(configuration: configuration, loop: context.mqttLoop)
        markerTopic = context.topics.marker(clientID: clientID)
        self.context = context
        logger = context.logger
        self.timeout = timeout
    }

    /// Keeps the client connected (with backoff) and hands messages to lookups, until
    /// cancelled.
    func run() async {
        let consumer = Task { for await message in client.messages { receive(message) } }
        defer { consumer.cancel() }
        await client.keepSubscribed(
            [
                .init(markerTopic, qos: .atLeastOnce),
                .init(context.topics.disconnectTopic, qos: .atLeastOnce),
                // QoS 0: the broker queues at most its queue limit (mosquitto's
                // max_queued_messages) of a QoS 1 subscription's retained messages and drops the
                // rest; at QoS 0 every revocation arrives. One lost with the connection comes
                // back with the retained set at the next subscription.
                .init(context.topics.revokedFilter, qos: .atMostOnce),
            ],
            checkingEvery: .seconds(1), logger: logger, problem: "the gateway's control client is not connected",
            connected: { [context] in context.brokerAnnounced($0.capabilities, persistent: false) },
            subscribed: { [context] _ in
                // A new connection follows no group: the directory starts again.
                context.groups.reset()
                self.subscriptionsMade()
            })
        failAll(.notConnected)
    }

    /// Whether the client is connected to the broker now.
    var isConnected: Bool {
        get async { await client.state == .connected }
    }

    /// Returns once the client is connected and subscribed, waiting up to the lookup time-out
    /// for that (a request right after the gateway started, or during a reconnect); throws
    /// ``Failure/notConnected`` after it.
    private func ready() async throws {
        let generation = subscribedConnections.read { $0 }
        if generation > 0, await client.state == .connected { return }
        // Subscribed again since the check above, or within the time-out.
        let made = await subscribedConnections.wait(timeout: .seconds(timeout)) { $0 != generation }
        guard made, await client.state == .connected else { throw Failure.notConnected }
    }

    /// The subscriptions of a new connection are made: requests go ahead.
    private func subscriptionsMade() {
        subscribedConnections.withLock { $0 += 1 }
    }

    /// Publishes at QoS 1 and returns once the broker has it.
    func publish(_ message: OutgoingPublish) async throws {
        try await ready()
        try await client.publish(
            topic: message.topic, payload: message.payload, qos: message.qos, retain: message.retain, properties: message.properties)
    }

    /// Publishes `publishes` (the route of the server API's chats, and of those a device's
    /// session could not publish): at most `window` waiting for the broker at once, each
    /// waiting up to the lookup time-out for the client to be connected.
    func publishChat(_ publishes: [OutgoingPublish], window: Int, completion: @escaping @Sendable ([(any Error)?]) -> Void) {
        Task {
            var outcomes = [(any Error)?](repeating: nil, count: publishes.count)
            await withTaskGroup(of: (Int, (any Error)?).self) { group in
                var next = publishes.indices.makeIterator()
                func start() {
                    guard let index = next.next() else { return }
                    group.addTask {
                        do {
                            try await self.publish(publishes[index])
                            return (index, nil)
                        } catch {
                            return (index, error)
                        }
                    }
                }
                for _ in 0..<max(1, window) { start() }
                while let (index, error) = await group.next() {
                    outcomes[index] = error
                    start()
                }
            }
            completion(outcomes)
        }
    }

    /// Subscribes to `filter` at QoS 0 (every retained message arrives, whatever the broker's
    /// queue limit) and returns once its retained messages have arrived; they, and what
    /// follows, go where ``receive(_:)`` sends them. The subscription stays until
    /// ``unfollow(_:)`` or until the connection is lost (the group directory starts again then).
    func follow(_ filter: String) async throws {
        _ = try await sync(filter, qos: .atMostOnce, matching: { _ in false }, keep: true)
    }

    /// Ends a ``follow(_:)``.
    func unfollow(_ filter: String) async {
        try? await client.unsubscribe(filter)
    }

    /// The retained messages on `filter` (and anything published there meanwhile) whose topic
    /// `matches` accepts.
    func retained(filter: String, matching matches: @escaping @Sendable (String) -> Bool) async throws -> [MosquittoMessage] {
        try await sync(filter, qos: .atLeastOnce, matching: matches, keep: false)
    }

    /// Subscribes to `filter`, publishes a marker and waits for it to come back; returns what
    /// arrived on the filter meanwhile that `matches` accepts. Without `keep`, the filter is
    /// unsubscribed again unless another lookup still uses it.
    private func sync(
        _ filter: String, qos: QoS, matching matches: @escaping @Sendable (String) -> Bool, keep: Bool
    ) async throws -> [MosquittoMessage] {
        try await ready()
        let id = lookups.withLock { lookups in
            lookups.nextID += 1
            lookups.pending[lookups.nextID] = Pending(filter: filter, matches: matches)
            if !keep { lookups.users[filter, default: 0] += 1 }
            return lookups.nextID
        }
        do {
            _ = try await client.subscribe(filter, qos: qos)
            try await client.publish(topic: markerTopic, payload: Array(String(id).utf8), qos: .atLeastOnce)
            let messages = try await waitForMarker(id)
            await release(id, unsubscribing: !keep)
            return messages
        } catch {
            await release(id, unsubscribing: !keep)
            throw error
        }
    }

    /// What arrived for lookup `id` once its marker came back; throws when the connection was
    /// lost first, or nothing came within the time-out.
    private func waitForMarker(_ id: UInt64) async throws -> [MosquittoMessage] {
        let timeout = self.timeout
        let outcome = await lookups.wait(timeout: .seconds(timeout)) { (lookups: inout Lookups) -> Result<[MosquittoMessage], Failure>? in
            guard let pending = lookups.pending[id] else { return .failure(.noAnswer(seconds: timeout)) }
            return pending.outcome.map { outcome in outcome.map { pending.messages } }
        }
        return try (outcome ?? .failure(.noAnswer(seconds: timeout))).get()
    }

    /// The marker of lookup `id` came back, or the connection was lost: the first counts.
    private func settle(_ id: UInt64, _ outcome: Result<Void, Failure>) {
        lookups.withLock { lookups in
            guard lookups.pending[id]?.outcome == nil else { return }
            lookups.pending[id]?.outcome = outcome
        }
    }

    /// Forgets lookup `id`; with `unsubscribing`, unsubscribes its filter unless another
    /// lookup uses it.
    private func release(_ id: UInt64, unsubscribing: Bool) async {
        let filter: String? = lookups.withLock { lookups in
            guard let pending = lookups.pending.removeValue(forKey: id), unsubscribing else { return nil }
            let left = (lookups.users[pending.filter] ?? 1) - 1
            lookups.users[pending.filter] = left > 0 ? left : nil
            return left > 0 ? nil : pending.filter
        }
        if let filter { try? await client.unsubscribe(filter) }
    }

    private func receive(_ message: MosquittoMessage) {
        if message.topic == markerTopic {
            if let id = UInt64(message.payloadString) { settle(id, .success(())) }
            return
        }
        if message.topic == context.topics.disconnectTopic {
            guard !message.payload.isEmpty, context.isFromAGateway(message) else { return }
            guard let disconnect = try? PayloadCodec.decode(DisconnectPayload.self, from: message.payload) else {
                logger.warning("ignored a disconnect that cannot be read", metadata: ["payload": "\(message.payloadString)"])
                return
            }
            Task { await self.disconnect(disconnect) }
            return
        }
        if case .groupMember(let group, let user)? = context.topics.classify(message.topic) {
            guard context.isFromAGateway(message) else { return }
            let since = message.payload.isEmpty ? nil : (try? PayloadCodec.decode(GroupMemberPayload.self, from: message.payload))?.since
            context.groups.apply(group: group, user: user, since: since, retained: message.retain)
            return
        }
        if let user = revokedUser(message.topic) {
            guard context.isFromAGateway(message) else { return }
            guard !message.payload.isEmpty else {
                context.revocations.forget(user: user)
                return
            }
            guard let revocation = try? PayloadCodec.decode(RevocationPayload.self, from: message.payload), revocation.user == user else {
                logger.warning("ignored a revocation that cannot be read", metadata: ["topic": "\(message.topic)"])
                return
            }
            context.revocations.revoke(user: user, issuedBefore: revocation.before)
            Task { await self.endRevokedSessions(of: user, reason: revocation.reason ?? "the token was revoked") }
            return
        }
        lookups.withLock { lookups in
            for (id, pending) in lookups.pending where pending.outcome == nil && pending.matches(message.topic) {
                lookups.pending[id]?.messages.append(message)
            }
        }
    }

    private func failAll(_ failure: Failure) {
        let ids = lookups.withLock { Array($0.pending.keys) }
        for id in ids { settle(id, .failure(failure)) }
    }

    /// The user of a `{prefix}/u/{user}/revoked` topic.
    private func revokedUser(_ topic: String) -> String? {
        let levels = topic.split(separator: "/", omittingEmptySubsequences: false)
        guard levels.count == 4, levels[0] == context.topics.prefix, levels[1] == "u", levels[3] == "revoked" else { return nil }
        return String(levels[2])
    }

    /// Ends the sessions `disconnect` names that this gateway holds and that logged in before it
    /// was asked for, at once and together. (A device that logged in again after the request,
    /// with a token the request's revocation let through, keeps that session: the request may
    /// reach this gateway, or be handled here, after that login.)
    private func disconnect(_ disconnect: DisconnectPayload) async {
        let sessions = await context.registry.sessions(of: disconnect.user, device: disconnect.device)
            .filter { disconnect.ends(sessionRegisteredAt: $0.entry.registeredAt) }
        guard !sessions.isEmpty else { return }
        logger.notice(
            "disconnecting at the backend's request",
            metadata: ["user": "\(disconnect.user)", "devices": "\(sessions.map(\.device))", "reason": "\(disconnect.reason)"])
        await withTaskGroup(of: Void.self) { group in
            for (_, entry) in sessions {
                group.addTask { await entry.end(.disconnected(disconnect.reason)) }
            }
        }
    }

    /// Ends the sessions of `user` here whose login token is older than their revocation.
    private func endRevokedSessions(of user: String, reason: String) async {
        guard let cutoff = context.revocations.cutoff(user: user) else { return }
        let sessions = await context.registry.sessions(of: user).filter { ($0.entry.issuedAt ?? .min) < cutoff }
        guard !sessions.isEmpty else { return }
        logger.notice("ending sessions whose token was revoked", metadata: ["user": "\(user)", "devices": "\(sessions.map(\.device))"])
        await withTaskGroup(of: Void.self) { group in
            for (_, entry) in sessions {
                group.addTask { await entry.end(.disconnected(reason)) }
            }
        }
    }
}
