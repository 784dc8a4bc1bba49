import AsyncToolkit

/// Counts the connections of a gateway that have not finished (channel closed and MQTT
/// session ended), so that shutting down can wait for the last one.
struct ConnectionTracker: Sendable {
    private let counter = AsyncCondition(0)

    /// A connection started.
    func enter() {
        counter.withLock { $0 += 1 }
    }

    /// A connection finished.
    func leave() {
        counter.withLock { $0 -= 1 }
    }

    /// Connections not finished yet.
    var live: Int { counter.read { $0 } }

    /// Returns once no connection is live.
    func waitUntilIdle() async {
        // Not cancellable: shutdown waits for the last connection.
        await Task { _ = await counter.wait { $0 == 0 } }.value
    }
}
