/// Which deliveries were already surfaced, by (sender, message id), within a bounded window
/// (PROTOCOL.md 6.4 and 10: devices de-duplicate by FROM and MESSAGE_ID).
///
/// The window holds the most recent `capacity` keys; the oldest is forgotten first. A
/// redelivery arrives after a reconnect, so a window of a few thousand messages covers it.
struct DeliveryDedup: Sendable {
    /// One delivery's identity.
    struct Key: Hashable, Sendable {
        var sender: String
        var messageID: String
    }

    /// How many keys are remembered.
    let capacity: Int
    private var seen: Set<Key> = []
    /// Keys in arrival order; the oldest at `head`.
    private var order: [Key] = []
    private var head = 0

    /// A window remembering the last `capacity` deliveries (at least 1).
    init(capacity: Int = 4096) {
        self.capacity = max(1, capacity)
    }

    /// Records the delivery; `true` the first time it is seen within the window, `false` for
    /// a duplicate (which the caller ACKs again but does not surface).
    mutating func firstSighting(sender: String, messageID: String) -> Bool {
        let key = Key(sender: sender, messageID: messageID)
        guard seen.insert(key).inserted else { return false }
        if order.count < capacity {
            order.append(key)
        } else {
            seen.remove(order[head])
            order[head] = key
            head = (head + 1) % capacity
        }
        return true
    }

    /// Whether the delivery is in the window.
    func contains(sender: String, messageID: String) -> Bool {
        seen.contains(Key(sender: sender, messageID: messageID))
    }

    /// How many keys the window holds.
    var count: Int { seen.count }
}
