import Synchronization

/// Counts the connections of a gateway that have not finished (channel closed and MQTT
/// session ended), so that shutting down can wait for the last one.
final class ConnectionTracker: Sendable {
    private struct State {
        var live = 0
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    /// A connection started.
    func enter() {
        state.withLock { $0.live += 1 }
    }

    /// A connection finished.
    func leave() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.live -= 1
            guard state.live == 0 else { return [] }
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Connections not finished yet.
    var live: Int { state.withLock { $0.live } }

    /// Returns once no connection is live.
    func waitUntilIdle() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.live == 0 { return true }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}
