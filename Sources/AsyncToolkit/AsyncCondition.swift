import Synchronization

/// State behind a lock, and tasks waiting until a condition on it holds: a monitor.
///
/// A waiter gives a closure that looks at the state (under the lock) and returns what it
/// waited for, or `nil` to go on waiting. It runs at once, then after every change made
/// through ``withLock(_:)``, waiters in the order they came; it may change the state when it
/// returns a value (take a permit, say), so waiters served first come first. A wait can end
/// with `nil` instead: at its time-out, or when its task is cancelled.
///
/// This one type replaces the waiter lists, gates and counters that were written by hand for
/// each use (`AsyncSemaphore` is built on it). Hand-written because no library the package
/// uses has it: Synchronization's `Mutex` does not wait, NIO's futures carry one value,
/// swift-async-algorithms has channels and sequences, not a condition on shared state.
public final class AsyncCondition<State: Sendable>: Sendable {
    private typealias Wake = @Sendable () -> Void

    private struct Waiter: Sendable {
        let id: UInt64
        /// The waiter's condition: a closure that resumes it, when it holds.
        let attempt: @Sendable (inout State) -> Wake?
        /// Resumes it with `nil` (time-out or cancellation).
        let expire: Wake
    }

    private struct Storage: Sendable {
        var state: State
        var waiters: [Waiter] = []
        var nextID: UInt64 = 0
        /// Waits that expired before they were registered.
        var expired: Set<UInt64> = []
    }

    private let storage: Mutex<Storage>

    // Every method that takes the lock is `@inline(never)`, and `wait` takes it only through
    // such a method. Synchronization's Mutex on Linux stamps the lock word with the thread id
    // that `_swift_stdlib_gettid()` keeps in a thread-local. Inlined into an async function
    // (AsyncSemaphore.run: a lock before `await operation()`, one after), the optimizer may
    // reuse that thread-local's address across the suspension, so the task, resumed on
    // another thread, locks and unlocks under the first thread's id: harmless until another
    // thread waits for the lock, and then FUTEX_UNLOCK_PI fails with EPERM and the process
    // stops with "Call to unlock Mutex on a thread which hasn't acquired the lock" (found by
    // the chaos run, in the connect gate during login storms, release builds only). In a frame
    // of its own, the id is read on the thread that runs it.

    public init(_ state: State) {
        self.storage = Mutex(Storage(state: state))
    }

    /// Runs `body` on the state under the lock; waiters whose condition now holds are resumed
    /// (after the lock is released).
    @discardableResult
    @inline(never)
    public func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        let (result, wakes) = try storage.withLock { storage -> (Result, [Wake]) in
            let result = try body(&storage.state)
            return (result, Self.settle(&storage))
        }
        for wake in wakes { wake() }
        return result
    }

    /// The state, or what `body` makes of it (under the lock, nobody is woken).
    @inline(never)
    public func read<Result>(_ body: (State) -> Result) -> Result {
        storage.withLock { body($0.state) }
    }

    /// Waiting tasks.
    public var waiting: Int { waiterCount() }

    @inline(never)
    private func waiterCount() -> Int { storage.withLock { $0.waiters.count } }

    /// Waits until `condition` returns a value, and returns it; `nil` if `timeout` passes (or
    /// the task is cancelled) first.
    public func wait<Value: Sendable>(
        timeout: Duration? = nil, until condition: @escaping @Sendable (inout State) -> Value?
    ) async -> Value? {
        let (ready, id) = firstAttempt(condition)
        if let ready {
            // What it took may let others go (it rarely does; it costs nothing when none wait).
            withLock { _ in }
            return ready
        }
        let timer = timeout.map { timeout in
            Task { [weak self] in
                try await Task.sleep(for: timeout)
                self?.expire(id)
            }
        }
        defer { timer?.cancel() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Value?, Never>) in
                self.register(id, condition, continuation)
            }
        } onCancel: {
            self.expire(id)
        }
    }

    /// Waits until `condition` returns a value, and returns it, whatever happens to the
    /// task meanwhile: for a wait that must see its outcome (work under way that will settle,
    /// a shutdown that waits for the last connection), where returning early would leave it
    /// unobserved.
    public func waitIgnoringCancellation<Value: Sendable>(until condition: @escaping @Sendable (inout State) -> Value?) async -> Value {
        let (ready, id) = firstAttempt(condition)
        if let ready {
            withLock { _ in }
            return ready
        }
        let value = await withCheckedContinuation { (continuation: CheckedContinuation<Value?, Never>) in
            self.register(id, condition, continuation)
        }
        // Only a time-out or a cancellation ends a wait with nil, and this one has neither.
        guard let value else { preconditionFailure("a wait without time-out or cancellation ended without its value") }
        return value
    }

    /// A new wait's number, and its value if its condition holds at once.
    @inline(never)
    private func firstAttempt<Value: Sendable>(_ condition: @Sendable (inout State) -> Value?) -> (Value?, UInt64) {
        storage.withLock { storage -> (Value?, UInt64) in
            storage.nextID += 1
            return (condition(&storage.state), storage.nextID)
        }
    }

    /// Adds the waiter `id`, unless its condition holds already or it expired meanwhile.
    @inline(never)
    private func register<Value: Sendable>(
        _ id: UInt64, _ condition: @escaping @Sendable (inout State) -> Value?, _ continuation: CheckedContinuation<Value?, Never>
    ) {
        let attempt: @Sendable (inout State) -> Wake? = { state in
            guard let value = condition(&state) else { return nil }
            return { continuation.resume(returning: value) }
        }
        let expire: Wake = { continuation.resume(returning: nil) }
        let resumeNow: Wake? = storage.withLock { storage -> Wake? in
            if storage.expired.remove(id) != nil { return expire }
            if let wake = attempt(&storage.state) { return wake }
            storage.waiters.append(Waiter(id: id, attempt: attempt, expire: expire))
            return nil
        }
        resumeNow?()
    }

    /// Waits until `condition` holds (`true`); false at the time-out or on cancellation.
    public func wait(timeout: Duration? = nil, until condition: @escaping @Sendable (State) -> Bool) async -> Bool {
        await wait(timeout: timeout) { (state: inout State) -> Bool? in condition(state) ? true : nil } ?? false
    }

    /// Ends the wait `id` with `nil`, or marks it to end as soon as it registers.
    @inline(never)
    private func expire(_ id: UInt64) {
        let expire = storage.withLock { storage -> Wake? in
            guard let index = storage.waiters.firstIndex(where: { $0.id == id }) else {
                // Not registered yet (or resumed already, a race with its time-out: then
                // nothing looks for the mark; marks far behind the newest wait are dropped).
                if storage.expired.count > 256 { storage.expired = storage.expired.filter { $0 + 1024 > storage.nextID } }
                storage.expired.insert(id)
                return nil
            }
            return storage.waiters.remove(at: index).expire
        }
        expire?()
    }

    private static func settle(_ storage: inout Storage) -> [Wake] {
        guard !storage.waiters.isEmpty else { return [] }
        var wakes: [Wake] = []
        var remaining: [Waiter] = []
        for waiter in storage.waiters {
            if let wake = waiter.attempt(&storage.state) { wakes.append(wake) } else { remaining.append(waiter) }
        }
        storage.waiters = remaining
        return wakes
    }
}

extension AsyncCondition where State == Int {
    /// As a count of work under way (connections not finished, chats not answered): one more.
    public func enter() {
        withLock { $0 += 1 }
    }

    /// One fewer; the waiters of ``waitUntilZero()`` go at the last.
    public func leave() {
        withLock { $0 -= 1 }
    }

    /// Returns once the count is zero (at once if it is), even if the task is cancelled:
    /// shutdown waits for the last piece of work.
    public func waitUntilZero() async {
        await waitIgnoringCancellation { $0 == 0 ? () : nil }
    }
}
