/// At most `limit` holders at once; the others wait their turn, first come first served.
/// A few lines over ``AsyncCondition``: neither the standard library nor the packages used
/// here have an asynchronous semaphore.
public struct AsyncSemaphore: Sendable {
    /// Permits held.
    private let held: AsyncCondition<Int>
    public let limit: Int

    public init(limit: Int) {
        precondition(limit > 0, "a semaphore must let something through")
        self.limit = limit
        self.held = AsyncCondition(0)
    }

    /// Takes a permit, waiting for one up to `timeout`; false when none came in time (or the
    /// task was cancelled).
    public func acquire(timeout: Duration? = nil) async -> Bool {
        let limit = self.limit
        return await held.wait(timeout: timeout) { (held: inout Int) -> Bool? in
            guard held < limit else { return nil }
            held += 1
            return true
        } ?? false
    }

    /// Takes a permit if one is free now, without waiting.
    public func tryAcquire() -> Bool {
        let limit = self.limit
        return held.withLock { held in
            guard held < limit else { return false }
            held += 1
            return true
        }
    }

    /// Gives a permit back.
    public func release() {
        held.withLock { $0 = max(0, $0 - 1) }
    }

    /// Permits held now.
    public var inUse: Int { held.read { $0 } }

    /// Tasks waiting for a permit.
    public var waiting: Int { held.waiting }

    /// Runs `operation` with a permit (waiting for one, even when cancelled: it runs, then).
    public func run<T: Sendable>(_ operation: () async throws -> T) async rethrows -> T {
        if await !acquire() {
            // Cancelled while waiting: still one at a time past the limit is not allowed,
            // so wait without the cancellation's shortcut.
            await Task { _ = await acquire() }.value
        }
        defer { release() }
        return try await operation()
    }
}
