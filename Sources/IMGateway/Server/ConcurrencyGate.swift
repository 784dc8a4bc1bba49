import Synchronization

/// Lets at most `limit` operations run at once; the others wait their turn, first come
/// first served.
final class ConcurrencyGate: Sendable {
    private struct State {
        var running = 0
        var waiting: [CheckedContinuation<Void, Never>] = []
        var head = 0
    }

    private let state = Mutex(State())
    let limit: Int

    init(limit: Int) {
        precondition(limit > 0, "a gate must let something through")
        self.limit = limit
    }

    /// Runs `operation` once fewer than `limit` others are running.
    func run<T: Sendable>(_ operation: () async throws -> T) async throws -> T {
        await enter()
        defer { leave() }
        return try await operation()
    }

    private func enter() async {
        let admitted = state.withLock { state -> Bool in
            guard state.running < limit else { return false }
            state.running += 1
            return true
        }
        guard !admitted else { return }
        await withCheckedContinuation { continuation in
            let admittedNow = state.withLock { state -> Bool in
                // Re-checked under the lock: a slot may have freed meanwhile.
                if state.running < limit {
                    state.running += 1
                    return true
                }
                state.waiting.append(continuation)
                return false
            }
            if admittedNow { continuation.resume() }
        }
    }

    private func leave() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.head < state.waiting.count else {
                state.running -= 1
                state.waiting.removeAll(keepingCapacity: true)
                state.head = 0
                return nil
            }
            // The slot passes straight to the next waiter: `running` stays the same.
            defer { state.head += 1 }
            return state.waiting[state.head]
        }
        next?.resume()
    }
}
