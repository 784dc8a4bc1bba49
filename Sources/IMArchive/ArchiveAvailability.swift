/// Whether the archive takes writes now. After a failed commit it refuses new messages at
/// once, saying when to try again, instead of queueing them behind a store that is down:
/// the first refusal waits 1 s, each further failure doubles it up to ``maxRetry``. Once the
/// time has passed, the next commit tries the store; success makes it available again. Pure:
/// time (monotonic nanoseconds) is passed in.
struct ArchiveAvailability: Sendable, Hashable {
    /// The first wait after a failure.
    static let firstRetry: UInt64 = 1_000_000_000
    /// The longest wait.
    static let maxRetry: UInt64 = 8_000_000_000

    enum State: Sendable, Hashable {
        case available
        /// Refusing until `until`; `wait` is the current back-off, `reason` the last failure.
        case unavailable(until: UInt64, wait: UInt64, reason: String)
    }

    private(set) var state: State = .available

    var isAvailable: Bool { if case .available = state { true } else { false } }

    /// `nil` when a write may be tried now; otherwise how long to wait, in milliseconds (at
    /// least 1), and why.
    func refusal(now: UInt64) -> (retryAfter: UInt32, reason: String)? {
        guard case .unavailable(let until, _, let reason) = state, now < until else { return nil }
        return (UInt32(clamping: max(1, (until - now + 999_999) / 1_000_000)), reason)
    }

    /// A commit failed at `now`: returns how long writes are refused, in milliseconds, and
    /// whether the archive was available before (the first failure of a run).
    mutating func failed(now: UInt64, reason: String) -> (retryAfter: UInt32, wasAvailable: Bool) {
        let wait: UInt64
        let wasAvailable: Bool
        switch state {
        case .available:
            wait = Self.firstRetry
            wasAvailable = true
        case .unavailable(_, let previous, _):
            wait = min(previous * 2, Self.maxRetry)
            wasAvailable = false
        }
        state = .unavailable(until: now + wait, wait: wait, reason: reason)
        return (UInt32(clamping: wait / 1_000_000), wasAvailable)
    }

    /// A commit succeeded: returns whether the archive had been unavailable.
    mutating func succeeded() -> Bool {
        defer { state = .available }
        return !isAvailable
    }
}
