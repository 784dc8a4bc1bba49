import AsyncToolkit

/// A publisher's window on the wrapper path (``WrapperChatRun``): a message holds a slot
/// until it is both acknowledged and received; whoever sees the second of the two calls
/// ``slotFreed()``.
///
/// `start-publish` waits for freed slots (``waitForFree()``); `callbacks` claims slots with
/// ``claim(limit:)`` and has a hook (``onFree(_:)``) start the next publish when one is freed.
///
/// Built on ``AsyncCondition``; not ``AsyncSemaphore``, which has no sequence claimed with
/// the slot, no hook run at each free, and no end that lets every waiter go.
final class PublishWindow: Sendable {
    private struct State: Sendable {
        var inUse = 0
        var lastSequence = 0
        /// Frees nobody has waited for yet (`start-publish`).
        var unclaimedFrees = 0
        var finished = false
        var onFree: (@Sendable () -> Void)?
    }

    private let state = AsyncCondition(State())

    /// A message completed: its slot is free.
    func slotFreed() {
        let hook = state.withLock { state in
            if state.inUse > 0 { state.inUse -= 1 }
            state.unclaimedFrees += 1
            return state.onFree
        }
        hook?()
    }

    /// Returns true once a slot was freed (at once if one was freed meanwhile), false once
    /// the window is finished.
    func waitForFree() async -> Bool {
        await state.wait { (state: inout State) -> Bool? in
            if state.unclaimedFrees > 0 {
                state.unclaimedFrees -= 1
                return true
            }
            return state.finished ? false : nil
        } ?? false
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
        state.withLock { state in
            state.finished = true
            state.onFree = nil
        }
    }
}
