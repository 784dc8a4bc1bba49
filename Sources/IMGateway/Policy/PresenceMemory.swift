/// What one device was last told of each watched device's presence, so that the same
/// presence reaching it twice (retained on the broker, and in an answer to a presence probe,
/// ``PresenceProbePayload``) is told once. A presence is the same when its status and time
/// are: a change always has a new time.
///
/// A new watch of a user forgets that user's devices, so its snapshot is told again. At most
/// ``capacity`` devices are remembered; past that everything is forgotten (a repeat may
/// then be told twice), so a broker that delivers presence for endless device ids cannot
/// grow it.
struct PresenceMemory: Sendable {
    /// The most devices remembered.
    static let capacity = 4096

    private struct Told: Hashable, Sendable {
        var status: PresencePayload.Status
        var ts: UInt64
    }

    /// Per user, per device.
    private var told: [String: [String: Told]] = [:]
    private(set) var count = 0

    /// Whether `presence` of `user`'s device is not what was last told of that device;
    /// remembers it either way.
    mutating func isNews(user: String, _ presence: PresencePayload) -> Bool {
        let now = Told(status: presence.status, ts: presence.ts)
        let before = told[user]?[presence.device]
        guard before != now else { return false }
        if before == nil {
            if count >= Self.capacity { forgetAll() }
            count += 1
        }
        told[user, default: [:]][presence.device] = now
        return true
    }

    /// Forgets what was told of `users`' devices.
    mutating func forget(users: some Sequence<String>) {
        for user in users {
            count -= told.removeValue(forKey: user)?.count ?? 0
        }
    }

    private mutating func forgetAll() {
        told = [:]
        count = 0
    }
}
