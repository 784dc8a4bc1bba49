import Synchronization

/// A queue between two tasks of a connection, read in batches: the reader takes
/// everything queued (up to a limit) in one go, so that work arriving faster than it is
/// done is handled — and written to the socket — in groups.
final class BatchingQueue<Element: Sendable>: Sendable {
    private struct State {
        var items: [Element] = []
        var waiter: CheckedContinuation<Void, Never>?
        var finished = false
    }

    private let state = Mutex(State())

    /// Adds an element (ignored after ``finish()``).
    func append(_ element: Element) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.finished else { return nil }
            state.items.append(element)
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Ends the queue: the reader gets what is left, then an empty batch.
    func finish() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// The next elements in order (at least one, at most `limit`), or none once finished
    /// and empty. One reader at a time.
    func next(upTo limit: Int) async -> [Element] {
        while true {
            let (batch, finished) = state.withLock { state -> ([Element], Bool) in
                let count = min(limit, state.items.count)
                let batch = Array(state.items.prefix(count))
                state.items.removeFirst(count)
                return (batch, state.finished)
            }
            if !batch.isEmpty { return batch }
            if finished || Task.isCancelled { return [] }
            await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in
                    let ready = state.withLock { state -> Bool in
                        if !state.items.isEmpty || state.finished { return true }
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
