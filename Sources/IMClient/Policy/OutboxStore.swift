/// Where durable outbox entries are kept so they survive what memory does not: an app
/// restart, a crash. Pluggable: an app can keep them in its own database.
///
/// The client saves an entry when it is enqueued (and again when it changes, e.g. its
/// attempts), removes it when its ACK arrives or its sender gives up, and loads them all
/// once at start to ``Outbox/restore(_:)`` them.
public protocol OutboxStore: Sendable {
    /// Every entry saved and not removed, in any order.
    func load() async throws -> [OutboxEntry]
    /// Inserts `entry`, or replaces the entry with the same id.
    func save(_ entry: OutboxEntry) async throws
    /// Removes the entry `id`; nothing if there is none.
    func remove(_ id: OutboxEntry.ID) async throws
}

/// An ``OutboxStore`` in memory: survives reconnects (as the outbox itself does), not the
/// process. The default.
public actor InMemoryOutboxStore: OutboxStore {
    private var entries: [OutboxEntry.ID: OutboxEntry] = [:]

    /// An empty store.
    public init() {}

    /// Every entry, in id order.
    public func load() -> [OutboxEntry] {
        entries.values.sorted { $0.id < $1.id }
    }

    public func save(_ entry: OutboxEntry) {
        entries[entry.id] = entry
    }

    public func remove(_ id: OutboxEntry.ID) {
        entries[id] = nil
    }
}
