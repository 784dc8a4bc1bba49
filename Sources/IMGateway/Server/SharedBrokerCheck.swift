import Foundation
import Logging
import Mosquitto

/// Whether other gateways use this gateway's broker, as their stats topics tell
/// (`{prefix}/$gateway/{id}/stats`, retained, renewed every `stats_interval`). A SQLite
/// archive is one gateway's alone: with another gateway on the broker, a device that moves
/// from one to the other would not find there what the first stored, so imgw refuses to start
/// that way (docs/OPERATIONS.md, "The message archive").
enum SharedBrokerCheck {
    /// How long after its `ts` another gateway's snapshot counts as live: three of this
    /// gateway's stats intervals, and some slack for clocks.
    static func liveWindow(statsInterval: Int) -> UInt64 {
        UInt64(max(1, statsInterval) * 3 + 5) * 1_000
    }

    /// The gateway ids (other than `gatewayID`) in `snapshots` whose stats are live at `now`
    /// (Unix milliseconds), sorted.
    static func live(_ snapshots: [StatsPayload], besides gatewayID: String, now: UInt64, statsInterval: Int) -> [String] {
        let window = liveWindow(statsInterval: statsInterval)
        let ids = snapshots.filter { $0.gateway != gatewayID && $0.ts + window >= now }.map(\.gateway)
        return Array(Set(ids)).sorted()
    }

    /// The other gateways with live stats on the broker; `nil` when the broker could not be
    /// asked within `timeout` (the check is then skipped, and says so).
    static func otherGateways(
        broker: BrokerEndpoint, topics: GatewayTopics, gatewayID: String, statsInterval: Int, loop: MosquittoEventLoop,
        logger: Logger, timeout: Duration = .seconds(3)
    ) async -> [String]? {
        var configuration = broker.clientConfiguration(
            clientID: GatewayTopics.gatewayClientID("check-\(UInt32.random(in: 0...UInt32.max))", gatewayID: gatewayID))
        configuration.connectTimeout = 3
        let client = MosquittoClient(configuration: configuration, loop: loop)
        defer { Task { await client.close() } }
        let filter = topics.stats(gatewayID: "+")
        let found = Task { () -> [StatsPayload]? in
            do {
                try await client.connect()
                _ = try await client.subscribe(filter, qos: .atMostOnce)
            } catch {
                logger.notice("cannot ask the broker for other gateways", metadata: ["error": "\(error)"])
                return nil
            }
            // Retained snapshots follow the SUBACK at once; a quiet moment ends them.
            var snapshots: [StatsPayload] = []
            let messages = Task {
                var collected: [StatsPayload] = []
                for await message in client.messages {
                    if let payload = try? PayloadCodec.decode(StatsPayload.self, from: message.payload) { collected.append(payload) }
                }
                return collected
            }
            try? await Task.sleep(for: .milliseconds(200))
            try? await client.disconnect()
            await client.close()
            snapshots = await messages.value
            return snapshots
        }
        let deadline = Task {
            try await Task.sleep(for: timeout)
            found.cancel()
            await client.abort()
            await client.close()
        }
        let snapshots = await found.value
        deadline.cancel()
        guard let snapshots else { return nil }
        return live(snapshots, besides: gatewayID, now: unixMilliseconds(), statsInterval: statsInterval)
    }
}
