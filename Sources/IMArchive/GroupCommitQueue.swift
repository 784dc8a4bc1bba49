import DequeModule

/// What waits for the archive's next commit, in order: messages with whoever waits for each
/// one's outcome, and device positions (one per device, the furthest). The writer takes a
/// batch of at most `maxBatch` messages and every position at once (group commit). Pure: the
/// ``MessageArchive`` holds it under a lock.
struct GroupCommitQueue<Waiter> {
    /// A message and whoever waits for it.
    struct Pending {
        var message: ArchiveMessage
        var waiter: Waiter
    }

    /// One commit's work.
    struct Batch {
        var messages: [ArchiveMessage] = []
        var waiters: [Waiter] = []
        var positions: [DevicePosition] = []

        var isEmpty: Bool { messages.isEmpty && positions.isEmpty }
    }

    private var messages: Deque<Pending> = []
    private var positions: [PositionKey: DevicePosition] = [:]

    private struct PositionKey: Hashable {
        var user: String
        var device: String
    }

    /// Messages waiting.
    var count: Int { messages.count }
    /// Whether nothing waits.
    var isEmpty: Bool { messages.isEmpty && positions.isEmpty }
    /// Whether positions wait.
    var hasPositions: Bool { !positions.isEmpty }

    mutating func append(_ message: ArchiveMessage, waiter: Waiter) {
        messages.append(Pending(message: message, waiter: waiter))
    }

    /// Keeps the furthest position of each device.
    mutating func save(_ position: DevicePosition) {
        let key = PositionKey(user: position.user, device: position.device)
        if let known = positions[key], known.offset >= position.offset { return }
        positions[key] = position
    }

    /// The oldest `maxBatch` messages (at least one is taken when any waits) and every position.
    mutating func take(maxBatch: Int) -> Batch {
        var batch = Batch()
        let count = min(messages.count, max(1, maxBatch))
        batch.messages.reserveCapacity(count)
        batch.waiters.reserveCapacity(count)
        for _ in 0..<count {
            let pending = messages.removeFirst()
            batch.messages.append(pending.message)
            batch.waiters.append(pending.waiter)
        }
        batch.positions = Array(positions.values)
        positions = [:]
        return batch
    }

    /// Takes the messages out (their waiters, to be told), keeping the positions.
    mutating func drainMessages() -> [Waiter] {
        defer { messages = [] }
        return messages.map(\.waiter)
    }

    /// Empties the queue (the archive closing): what waited, to be told.
    mutating func drain() -> [Waiter] {
        defer { messages = []; positions = [:] }
        return messages.map(\.waiter)
    }
}
