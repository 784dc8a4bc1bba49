import Foundation
import Logging
import Mosquitto
import Synchronization

/// A location share as published, retained, on `{prefix}/u/{sharer}/location/share`
/// (message expiry = what is left of the share; an empty retained message ends it).
struct LocationSharePayload: Codable, Hashable, Sendable {
    /// The sharer.
    var user: String
    /// Who may watch.
    var audience: [String]
    /// When the share ends, Unix milliseconds.
    var until: UInt64
}

/// Who shares their location with whom, for every gateway on the broker: each gateway
/// process follows `{prefix}/u/+/location/share` (retained) with a client of its own and
/// checks a watcher against it before subscribing it to, and again before forwarding,
/// a sharer's positions. A share started on this process is known here at once.
///
/// A lock, not an actor: checked for every position forwarded to a watcher, from the
/// connections' event loops, which must not suspend.
final class LocationShareDirectory: Sendable {
    private let shares: Mutex<LocationShares>

    init(maxDuration: Double) {
        shares = Mutex(LocationShares(maxDuration: maxDuration))
    }

    private static func now() -> Double { Date.now.timeIntervalSince1970 }

    func start(sharer: String, audience: Set<String>, duration: Double) -> LocationShares.Share {
        shares.withLock { $0.start(sharer: sharer, audience: audience, duration: duration, now: Self.now()) }
    }

    func stop(sharer: String) {
        _ = shares.withLock { $0.stop(sharer: sharer) }
    }

    func canWatch(watcher: String, sharer: String) -> Bool {
        watcher == sharer || shares.withLock { $0.canWatch(watcher: watcher, sharer: sharer, now: Self.now()) }
    }

    func isSharing(_ sharer: String) -> LocationShares.Share? {
        shares.withLock { $0.share(of: sharer, now: Self.now()) }
    }

    /// A retained share message (or its removal) seen on the broker.
    func apply(sharer: String, payload: [UInt8]) {
        guard !payload.isEmpty, let share = try? PayloadCodec.decode(LocationSharePayload.self, from: payload), share.user == sharer else {
            stop(sharer: sharer)
            return
        }
        let remaining = Double(share.until) / 1000 - Self.now()
        if remaining > 0 {
            _ = start(sharer: sharer, audience: Set(share.audience), duration: remaining)
        } else {
            stop(sharer: sharer)
        }
    }

    /// Follows every share on the broker until cancelled (reconnecting with backoff).
    static func follow(_ directory: LocationShareDirectory, context: GatewayContext) async {
        var configuration = context.broker.clientConfiguration(clientID: GatewayTopics.gatewayClientID("shares", gatewayID: context.gatewayID))
        configuration.keepalive = 60
        let client = MosquittoClient(configuration: configuration, loop: context.mqttLoop)
        let filter = "\(context.configuration.topicPrefix)/u/+/location/share"
        let consumer = Task {
            for await message in client.messages {
                let levels = message.topic.split(separator: "/", omittingEmptySubsequences: false)
                guard levels.count >= 5 else { continue }
                guard context.isFromAGateway(message) else { continue }
                directory.apply(sharer: String(levels[levels.count - 3]), payload: message.payload)
            }
        }
        defer { consumer.cancel() }
        await client.keepSubscribed(
            [.init(filter, qos: .atLeastOnce)], checkingEvery: .seconds(5), logger: context.logger, problem: "location shares not followed")
    }
}
