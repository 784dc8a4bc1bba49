/// How long the gateway's long-lived clients (the control client, the offline-push client,
/// the stats topic, the location share directory) and the embedded broker's supervisor wait
/// before trying again: `first` after a failure, doubling each failure up to `limit`, back
/// to `first` once something worked. One policy for all of them.
struct RetryBackoff: Sendable, Hashable {
    let first: Duration
    let limit: Duration
    /// The wait after the next failure.
    private(set) var current: Duration

    /// 1 s, doubling up to 30 s.
    init(first: Duration = .seconds(1), limit: Duration = .seconds(30)) {
        self.first = first
        self.limit = max(first, limit)
        self.current = first
    }

    /// A failure: the wait before trying again (the next one waits twice as long).
    mutating func failed() -> Duration {
        defer { current = min(current * 2, limit) }
        return current
    }

    /// It worked: the next failure waits `first` again.
    mutating func succeeded() {
        current = first
    }
}
