import Synchronization

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
/// reads the base (the producer), behind a mutex. Continuations are resumed outside the lock.
final class AsyncBatchStorage<Base: AsyncSequence & Sendable>: Sendable where Base.Element: Sendable {
    typealias Element = Base.Element

    private struct State {
        var accumulator: BatchAccumulator<Element>
        /// A full batch the consumer has not taken; the producer waits until it does.
        var full: [Element]?
        var started = false
        var finished = false
        var failure: Base.Failure?
        var cancelled = false
        var producerTask: Task<Void, Never>?
        /// The consumer waiting for a change.
        var consumer: CheckedContinuation<Void, Never>?
        /// A change happened while no consumer was waiting (so the next wait returns at once).
        var consumerSignalled = false
        /// The producer waiting for the full batch to be taken.
        var producer: CheckedContinuation<Void, Never>?

        /// The consumer to resume after a change, or a note of the change if none waits.
        mutating func signalConsumer() -> CheckedContinuation<Void, Never>? {
            guard let consumer else {
                consumerSignalled = true
                return nil
            }
            self.consumer = nil
            return consumer
        }
    }

    private enum Decision {
        case deliver([Element], resumingProducer: CheckedContinuation<Void, Never>?)
        case fail(Base.Failure)
        case end
        case wait(until: ContinuousClock.Instant?)
    }

    private let base: Base
    private let state: Mutex<State>

    init(base: Base, policy: BatchPolicy) {
        self.base = base
        self.state = Mutex(State(accumulator: BatchAccumulator(policy: policy)))
    }

    // MARK: Consumer

    /// The next batch; `nil` at the end or once cancelled.
    func next() async throws(Base.Failure) -> [Element]? {
        startIfNeeded()
        while true {
            let now = ContinuousClock.now
            let decision = state.withLock { state -> Decision in
                guard !state.cancelled else { return .end }
                state.consumerSignalled = false  // what follows sees the latest state
                if let batch = state.full {
                    state.full = nil
                    defer { state.producer = nil }
                    return .deliver(batch, resumingProducer: state.producer)
                }
                if state.finished {
                    if !state.accumulator.isEmpty { return .deliver(state.accumulator.flush(), resumingProducer: nil) }
                    if let failure = state.failure {
                        state.failure = nil
                        return .fail(failure)
                    }
                    return .end
                }
                if state.accumulator.isDue(now: now) {
                    return .deliver(state.accumulator.flush(), resumingProducer: nil)
                }
                return .wait(until: state.accumulator.deadline)
            }
            switch decision {
            case .deliver(let batch, let producer):
                producer?.resume()
                return batch
            case .fail(let failure):
                throw failure
            case .end:
                return nil
            case .wait(let deadline):
                await waitForChange(until: deadline)
                if Task.isCancelled {
                    cancel()
                    return nil
                }
            }
        }
    }

    /// Returns at `deadline` or when the producer signals a change, whichever comes first
    /// (or when the task is cancelled). Elements added to a non-empty batch signal nothing:
    /// they only move its deadline later.
    private func waitForChange(until deadline: ContinuousClock.Instant?) async {
        guard let deadline else { return await waitForSignal() }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(until: deadline, clock: .continuous) }
            group.addTask { await self.waitForSignal() }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForSignal() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state in
                    if state.consumerSignalled || state.cancelled {
                        state.consumerSignalled = false
                        return true
                    }
                    state.consumer = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            // Before the continuation is stored, the flag makes the wait return at once.
            state.withLock { $0.signalConsumer() }?.resume()
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
        let (consumer, isFull, cancelled) = state.withLock { state in
            guard !state.cancelled else { return (CheckedContinuation<Void, Never>?.none, false, true) }
            let wasEmpty = state.accumulator.isEmpty
            if let batch = state.accumulator.add(element, now: now) {
                state.full = batch
                return (state.signalConsumer(), true, false)
            }
            // The first element gives the batch a deadline the consumer must start waiting for.
            return (wasEmpty ? state.signalConsumer() : nil, false, false)
        }
        consumer?.resume()
        guard !cancelled else { return false }
        if isFull { await waitUntilTaken() }
        return !state.withLock { $0.cancelled }
    }

    private func waitUntilTaken() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state in
                    guard state.full != nil, !state.cancelled else { return true }
                    state.producer = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            cancel()
        }
    }

    private func finish(failure: Base.Failure?) {
        state.withLock { state in
            state.finished = true
            state.failure = failure
            return state.signalConsumer()
        }?.resume()
    }

    // MARK: Cancellation

    /// Stops everything: the producer task is cancelled, waiters are resumed, `next()`
    /// returns `nil` from now on. Idempotent.
    func cancel() {
        let (task, consumer, producer) = state.withLock { state in
            state.cancelled = true
            state.full = nil
            _ = state.accumulator.flush()
            defer {
                state.producerTask = nil
                state.consumer = nil
                state.producer = nil
            }
            return (state.producerTask, state.consumer, state.producer)
        }
        task?.cancel()
        consumer?.resume()
        producer?.resume()
    }
}
