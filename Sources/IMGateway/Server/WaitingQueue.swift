import Synchronization

/// Work handed from producers to one consumer task that waits for it: the storage (a FIFO,
/// a priority queue) sits behind a lock, producers change it and wake the consumer, and the
/// consumer takes what it finds or sleeps until there is some.
final class WaitingQueue<Storage: Sendable>: Sendable {
    private struct State {
        var storage: Storage
        var waiter: CheckedContinuation<Void, Never>?
        var finished = false
        /// Counts changes, so that the consumer never sleeps through one made between
        /// finding nothing and registering as the waiter.
        var changes: UInt64 = 0
    }

    private let state: Mutex<State>

    init(_ storage: Storage) {
        state = Mutex(State(storage: storage))
    }

    /// Changes the storage (adds work) and wakes the consumer; ignored after ``finish()``.
    func produce(_ change: (inout Storage) -> Void) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.finished else { return nil }
            change(&state.storage)
            state.changes &+= 1
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Ends the queue: the consumer gets what is left, then nil.
    func finish() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// What `take` finds in the storage, waiting until it finds something; nil once the
    /// queue is finished (or the task cancelled) and `take` finds nothing. One consumer at a
    /// time.
    func consume<Work: Sendable>(_ take: (inout Storage) -> Work?) async -> Work? {
        while true {
            let (work, finished, seen) = state.withLock { state -> (Work?, Bool, UInt64) in
                (take(&state.storage), state.finished, state.changes)
            }
            if let work { return work }
            if finished || Task.isCancelled { return nil }
            await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in
                    let ready = state.withLock { state -> Bool in
                        if state.finished || state.changes != seen { return true }
                        state.waiter = continuation
                        return false
                    }
                    if ready { continuation.resume() }
                }
            } onCancel: {
                self.finish()
            }
        }
    }
}
