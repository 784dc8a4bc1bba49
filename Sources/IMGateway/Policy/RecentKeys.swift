import DequeModule

/// The last `capacity` keys seen, oldest forgotten first.
public struct RecentKeys: Sendable {
    private var order: Deque<String> = []
    private var keys: Set<String> = []
    /// How many keys it remembers.
    public let capacity: Int

    /// An empty memory of `capacity` keys.
    public init(capacity: Int) {
        precondition(capacity > 0)
        self.capacity = capacity
    }

    /// Remembers `key`; false if it was remembered already.
    public mutating func insert(_ key: String) -> Bool {
        guard keys.insert(key).inserted else { return false }
        order.append(key)
        if order.count > capacity, let oldest = order.popFirst() { keys.remove(oldest) }
        return true
    }

    /// Whether `key` is remembered.
    public func contains(_ key: String) -> Bool { keys.contains(key) }
}
