import Synchronization

/// A publisher's window on the wrapper path (``WrapperChatRun``): a message holds a slot
/// until it is both acknowledged and received; whoever sees the second of the two calls
/// ``slotFreed()``.
///
/// `start-publish` waits for freed slots (``waitForFree()``); `callbacks` claims slots with
/// ``claim(limit:)`` and has a hook (``onFree(_:)``) start the next publish when one is freed.
final class PublishWindow: Sendable {
    private struct State {
        var inUse = 0
        var lastSequence = 0
        /// Frees nobody has waited for yet (`start-publish`).
        var unclaimedFrees = 0
        var waiter: CheckedContinuation<Bool, Never>?
        var finished = false
        var onFree: (@Sendable () -> Void)?
    }

    private let state = Mutex(State())

    /// A message completed: its slot is free.
    func slotFreed() {
        let (waiter, hook) = state.withLock { state -> (CheckedContinuation<Bool, Never>?, (@Sendable () -> Void)?) in
            if state.inUse > 0 { state.inUse -= 1 }
            if let waiter = state.waiter {
                state.waiter = nil
                return (waiter, state.onFree)
            }
            state.unclaimedFrees += 1
            return (nil, state.onFree)
        }
        waiter?.resume(returning: true)
        hook?()
    }

    /// Returns true once a slot was freed (at once if one was freed meanwhile), false once
    /// the window is finished.
    func waitForFree() async -> Bool {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> Bool? in
                if state.unclaimedFrees > 0 {
                    state.unclaimedFrees -= 1
                    return true
                }
                if state.finished { return false }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Takes a slot and returns the next sequence number, or nil when `limit` slots are in use.
    func claim(limit: Int) -> Int? {
        state.withLock { state in
            guard state.inUse < limit, !state.finished else { return nil }
            state.inUse += 1
            state.lastSequence += 1
            return state.lastSequence
        }
    }

    /// Gives back the slot and sequence number of the last ``claim(limit:)`` (not sent).
    func unclaim() {
        state.withLock { state in
            state.inUse -= 1
            state.lastSequence -= 1
        }
    }

    /// Runs `hook` after every freed slot.
    func onFree(_ hook: @escaping @Sendable () -> Void) {
        state.withLock { $0.onFree = hook }
    }

    /// No more publishing: a waiter returns false, the hook is dropped.
    func finish() {
        let waiter = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            state.finished = true
            state.onFree = nil
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: false)
    }
}
