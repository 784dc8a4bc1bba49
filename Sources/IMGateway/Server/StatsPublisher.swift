import Foundation
import Logging
import Mosquitto
import ServiceLifecycle

/// Publishes the gateway's counters, retained, on `{prefix}/$gateway/{id}/stats` every
/// `stats_interval` seconds (`mosquitto_sub -v -t 'im/$gateway/+/stats'`), through a
/// client of its own. Reconnects with backoff when the broker goes away.
///
/// The client id has a random part, as the control client's has: two gateways given the
/// same `gateway_id` would otherwise take each other's session over on every reconnect. The
/// client follows its own topic, and a live snapshot there from another process (another
/// `instance`) makes a warning: the two gateways' stats overwrite each other. The
/// snapshot goes at QoS 0: a QoS 1 publish whose connection ends before its PUBACK waits for
/// the next connect, which this loop, waiting for it, would never make.
struct StatsPublisher: Sendable {
    let context: GatewayContext
    /// This process's id in the payload: a live snapshot on the topic with another one means
    /// a second gateway uses this `gateway_id` (``otherInstance(in:besides:)``).
    let instance = String(UInt64.random(in: 0...UInt64.max), radix: 36)

    func payload() async -> StatsPayload {
        StatsPayload(
            gateway: context.gatewayID, ts: unixMilliseconds(),
            connections: context.statistics.connections.read { $0 },
            loggedIn: context.statistics.loggedIn,
            sessions: await context.registry.count,
            messagesIn: context.statistics.messagesIn,
            messagesOut: context.statistics.messagesOut,
            uptimeSeconds: Int((ContinuousClock.now - context.statistics.started).components.seconds), instance: instance)
    }

    /// The instance of another gateway process that published `message` live on this
    /// gateway's stats topic, or `nil` (this process, `instance`; a retained snapshot, which
    /// may be an earlier run's; no instance).
    static func otherInstance(in message: MosquittoMessage, besides instance: String) -> String? {
        guard !message.retain, let payload = try? PayloadCodec.decode(StatsPayload.self, from: message.payload),
              let other = payload.instance, other != instance
        else { return nil }
        return other
    }

    /// Runs until cancelled.
    func run() async {
        let interval = context.configuration.statsInterval
        guard interval > 0 else { return }  // 0 turns the stats topic off
        var configuration = context.broker.clientConfiguration(clientID: GatewayTopics.gatewayClientID("stats", gatewayID: context.gatewayID))
        configuration.keepalive = 60
        let client = MosquittoClient(configuration: configuration, loop: context.mqttLoop)
        let topic = context.topics.stats(gatewayID: context.gatewayID)
        // With a SQLite archive, every gateway's stats: one that appears after this one started
        // shares the broker, which a SQLite archive cannot (SharedBrokerCheck).
        let soloArchive = context.configuration.archive.store == .sqlite
        let filter = soloArchive ? context.topics.stats(gatewayID: "+") : topic
        // Another process publishing as this gateway, or another gateway: said once each.
        let consumer = Task { [context] in
            var told: Set<String> = []
            for await message in client.messages {
                if message.topic != topic {
                    guard let payload = try? PayloadCodec.decode(StatsPayload.self, from: message.payload),
                          !SharedBrokerCheck.live([payload], besides: context.gatewayID, now: unixMilliseconds(), statsInterval: interval).isEmpty,
                          told.count < 16, told.insert("gateway " + payload.gateway).inserted
                    else { continue }
                    context.logger.error(
                        "another gateway uses this broker while this one's message archive is a SQLite file of its own: devices moving between them miss messages; give every gateway the same PostgreSQL archive (archive.url)",
                        metadata: ["other-gateway": "\(payload.gateway)"])
                    continue
                }
                guard let other = Self.otherInstance(in: message, besides: instance), told.count < 16, told.insert(other).inserted else { continue }
                context.logger.warning(
                    "another imgw publishes its stats as this gateway: give each gateway its own gateway_id",
                    metadata: ["gateway_id": "\(context.gatewayID)", "other-instance": "\(other)", "instance": "\(instance)"])
            }
        }
        defer { consumer.cancel() }
        var backoff = RetryBackoff()
        while !Task.isCancelled {
            do {
                if await client.state != .connected {
                    try await client.connect()
                    _ = try await client.subscribe(filter, qos: .atMostOnce)
                }
                backoff.succeeded()
                try await client.publish(
                    topic: topic, payload: PayloadCodec.encode(await payload()), qos: .atMostOnce, retain: true,
                    properties: MQTTProperties(contentType: "application/json"))
                try await Task.sleep(for: .seconds(interval))
            } catch is CancellationError {
                break
            } catch {
                let delay = backoff.failed()
                context.logger.warning("stats not published", metadata: ["error": "\(error)", "retry-in": "\(delay)"])
                try? await Task.sleep(for: delay)
            }
        }
        // A gateway that stops cleanly takes its snapshot away: it no longer uses the broker
        // (SharedBrokerCheck looks for live ones).
        if await client.state == .connected {
            try? await client.publish(topic: topic, payload: [], qos: .atMostOnce, retain: true)
        }
        try? await client.disconnect()
        await client.close()
    }
}
