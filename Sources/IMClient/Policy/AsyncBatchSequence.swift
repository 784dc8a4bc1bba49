import AsyncToolkit

extension AsyncSequence where Self: Sendable, Element: Sendable {
    /// The elements in batches cut by `policy` (debounce, timeout, maximum count; see
    /// ``BatchPolicy``), timed by the continuous clock.
    ///
    /// Batches are never empty and keep the order. When the base sequence ends, the elements
    /// gathered so far are delivered at once, then the sequence ends (or throws the base's
    /// error). Elements keep being gathered while the consumer is busy with a batch; a full
    /// batch waits for the consumer (the base is not read meanwhile). Cancelling the task
    /// that iterates, or dropping the iterator, cancels the reading of the base.
    public func batched(_ policy: BatchPolicy = BatchPolicy()) -> AsyncBatchSequence<Self> {
        AsyncBatchSequence(base: self, policy: policy)
    }
}

/// An asynchronous sequence of batches of the elements of `Base`: see
/// ``_Concurrency/AsyncSequence/batched(_:)``.
///
/// Hand-written because swift-async-algorithms has a debounce and chunks by count or by a
/// signal, not the three rules of ``BatchPolicy`` together (a debounce that a time-out and a
/// count cut short).
public struct AsyncBatchSequence<Base: AsyncSequence & Sendable>: AsyncSequence, Sendable
where Base.Element: Sendable {
    public typealias Element = [Base.Element]
    public typealias Failure = Base.Failure

    let base: Base
    let policy: BatchPolicy

    init(base: Base, policy: BatchPolicy) {
        self.base = base
        self.policy = policy
    }

    public func makeAsyncIterator() -> Iterator {
        Iterator(storage: AsyncBatchStorage(base: base, policy: policy))
    }

    /// The iterator: the base is read by a task of its own, started by the first `next()`
    /// and cancelled when the iterator is dropped.
    public struct Iterator: AsyncIteratorProtocol, Sendable {
        public typealias Element = [Base.Element]
        public typealias Failure = Base.Failure

        /// Cancels the reading of the base when the last copy of the iterator goes away.
        private final class Lifetime: Sendable {
            let storage: AsyncBatchStorage<Base>
            init(storage: AsyncBatchStorage<Base>) { self.storage = storage }
            deinit { storage.cancel() }
        }

        private let lifetime: Lifetime

        init(storage: AsyncBatchStorage<Base>) {
            self.lifetime = Lifetime(storage: storage)
        }

        public mutating func next() async throws(Base.Failure) -> [Base.Element]? {
            try await lifetime.storage.next()
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async throws(Base.Failure) -> [Base.Element]? {
            try await lifetime.storage.next()
        }
    }
}

/// The state shared by an ``AsyncBatchSequence/Iterator`` (the consumer) and the task that
/// reads the base (the producer), in an `AsyncCondition`: each waits there for what the other
/// changes (the consumer for a change or the batch's deadline, the producer for its full
/// batch to be taken).
final class AsyncBatchStorage<Base: AsyncSequence & Sendable>: Sendable where Base.Element: Sendable {
    typealias Element = Base.Element

    private struct State: Sendable {
        var accumulator: BatchAccumulator<Element>
        /// A full batch the consumer has not taken; the producer waits until it does.
        var full: [Element]?
        var started = false
        var finished = false
        var failure: Base.Failure?
        var cancelled = false
        var producerTask: Task<Void, Never>?
        /// Changes the consumer waits for: a first element (its batch now has a deadline), a
        /// full batch, the end. Elements added to a batch that has some only move its
        /// deadline later, and change nothing here.
        var changes: UInt64 = 0
    }

    private enum Decision {
        case deliver([Element])
        case fail(Base.Failure)
        case end
        case wait(until: ContinuousClock.Instant?, seen: UInt64)
    }

    private let base: Base
    private let state: AsyncCondition<State>

    init(base: Base, policy: BatchPolicy) {
        self.base = base
        self.state = AsyncCondition(State(accumulator: BatchAccumulator(policy: policy)))
    }

    // MARK: Consumer

    /// The next batch; `nil` at the end or once cancelled.
    func next() async throws(Base.Failure) -> [Element]? {
        startIfNeeded()
        while true {
            let now = ContinuousClock.now
            // Taking the full batch lets the producer go on (it waits for that).
            let decision = state.withLock { state -> Decision in
                guard !state.cancelled else { return .end }
                if let batch = state.full {
                    state.full = nil
                    return .deliver(batch)
                }
                if state.finished {
                    if !state.accumulator.isEmpty { return .deliver(state.accumulator.flush()) }
                    if let failure = state.failure {
                        state.failure = nil
                        return .fail(failure)
                    }
                    return .end
                }
                if state.accumulator.isDue(now: now) {
                    return .deliver(state.accumulator.flush())
                }
                return .wait(until: state.accumulator.deadline, seen: state.changes)
            }
            switch decision {
            case .deliver(let batch):
                return batch
            case .fail(let failure):
                throw failure
            case .end:
                return nil
            case .wait(let deadline, let seen):
                // Ends at a change, at the deadline (nil), or when the task is cancelled (nil).
                _ = await state.wait(timeout: deadline.map { max(.zero, $0 - ContinuousClock.now) }) { state -> Void? in
                    state.changes != seen || state.cancelled ? () : nil
                }
                if Task.isCancelled {
                    cancel()
                    return nil
                }
            }
        }
    }

    // MARK: Producer

    private func startIfNeeded() {
        let start = state.withLock { state in
            guard !state.started, !state.cancelled else { return false }
            state.started = true
            return true
        }
        guard start else { return }
        let task = Task { [base] in
            var iterator = base.makeAsyncIterator()
            do throws(Base.Failure) {
                while let element = try await iterator.next(isolation: nil) {
                    guard await self.add(element) else { return }
                }
                self.finish(failure: nil)
            } catch {
                self.finish(failure: error)
            }
        }
        let cancelled = state.withLock { state in
            state.producerTask = task
            return state.cancelled
        }
        if cancelled { task.cancel() }
    }

    /// Adds an element; waits while a full batch is not taken. `false`: stop reading.
    private func add(_ element: Element) async -> Bool {
        let now = ContinuousClock.now
        let (isFull, cancelled) = state.withLock { state -> (Bool, Bool) in
            guard !state.cancelled else { return (false, true) }
            let wasEmpty = state.accumulator.isEmpty
            if let batch = state.accumulator.add(element, now: now) {
                state.full = batch
                state.changes &+= 1
                return (true, false)
            }
            // The first element gives the batch a deadline the consumer must start waiting for.
            if wasEmpty { state.changes &+= 1 }
            return (false, false)
        }
        guard !cancelled else { return false }
        if isFull {
            let taken = await state.wait { state -> Void? in state.full == nil || state.cancelled ? () : nil }
            // The producer's task was cancelled (the iterator went away).
            if taken == nil { cancel() }
        }
        return !state.read { $0.cancelled }
    }

    private func finish(failure: Base.Failure?) {
        state.withLock { state in
            state.finished = true
            state.failure = failure
            state.changes &+= 1
        }
    }

    // MARK: Cancellation

    /// Stops everything: the producer task is cancelled, waiters return, `next()` returns
    /// `nil` from now on. Idempotent.
    func cancel() {
        let task = state.withLock { state in
            state.cancelled = true
            state.full = nil
            _ = state.accumulator.flush()
            defer { state.producerTask = nil }
            return state.producerTask
        }
        task?.cancel()
    }
}
