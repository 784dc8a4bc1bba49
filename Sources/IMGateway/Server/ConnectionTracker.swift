import AsyncToolkit
import Synchronization

/// Counts work under way that shutdown waits for: the connections of a gateway that have not
/// finished (channel closed and MQTT session ended), the chats ``ChatAcceptance`` has not
/// answered yet. Entering and leaving are an atomic add each (they happen per chat); only a
/// leave that makes it idle takes the lock that wakes waiters.
final class ConnectionTracker: Sendable {
    private let count = Atomic<Int>(0)
    /// Waiters for idleness, and how many times the count reached zero.
    private let idle = AsyncCondition<UInt64>(0)

    /// Work started.
    func enter() {
        count.add(1, ordering: .relaxed)
    }

    /// Work finished.
    func leave() {
        guard count.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        idle.withLock { $0 &+= 1 }
    }

    /// Work not finished yet.
    var live: Int { count.load(ordering: .relaxed) }

    /// Returns once no work is under way.
    func waitUntilIdle() async {
        // Not cancellable: shutdown waits for the last connection.
        await Task {
            while true {
                let generation = idle.read { $0 }
                if count.load(ordering: .acquiring) == 0 { return }
                // The last leave after the read above bumps the generation.
                _ = await idle.wait { $0 != generation }
            }
        }.value
    }
}
