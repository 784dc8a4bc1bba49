/// Exponential backoff with full jitter inside levels (seed 003): how long to wait before
/// reconnect attempt `n`.
///
/// Attempt 0 waits a random time in (0, base], attempt 1 in (base, 2·base], attempt 2 in
/// (2·base, 4·base], and so on, each level twice as high as the one before, until the top of a
/// level would pass `cap`: from then on every attempt draws from (cap/2, cap]. With the
/// defaults (1 s, 32 s) the levels are (0, 1], (1, 2], (2, 4], (4, 8], (8, 16] and, for attempt
/// 5 and beyond, (16, 32] seconds.
///
/// Pure: the randomness is injected, so a seeded generator makes the delays reproducible.
///
/// ```swift
/// var generator = SystemRandomNumberGenerator()
/// let delay = configuration.backoff.delay(attempt: attempt, using: &generator)
/// try await Task.sleep(for: delay)
/// ```
public struct ReconnectBackoff: Sendable, Hashable {
    /// The top of level 0: the first attempt waits in (0, base]. Default 1 s.
    public var base: Duration
    /// The top of the last level: no delay is longer. Default 32 s.
    public var cap: Duration

    /// Creates a backoff. Both durations must be positive.
    public init(base: Duration = .seconds(1), cap: Duration = .seconds(32)) {
        precondition(base > .zero, "the backoff base must be positive")
        precondition(cap > .zero, "the backoff cap must be positive")
        self.base = base
        self.cap = cap
    }

    /// The bounds of `attempt`'s level: delays are drawn from (lower, upper].
    ///
    /// Level 0 (and any negative attempt) is (0, min(base, cap)]. Level n ≥ 1 is (u/2, u] with
    /// u = min(base·2ⁿ, cap). Computed by doubling, so huge attempts (`Int.max`) do not
    /// overflow: they are simply the cap's level.
    public func level(_ attempt: Int) -> (lower: Duration, upper: Duration) {
        guard attempt > 0 else { return (.zero, min(base, cap)) }
        var upper = base
        var doublings = 0
        while doublings < attempt {
            // Doubling past the cap (or past half of it) means the cap's level: stop before
            // the multiplication could overflow.
            guard upper < cap, upper <= cap / 2 else {
                upper = cap
                break
            }
            upper = upper * 2
            doublings += 1
        }
        upper = min(upper, cap)
        return (upper / 2, upper)
    }

    /// A delay drawn uniformly from `attempt`'s level, at nanosecond resolution: never
    /// `lower` itself (the level is open below) and never more than `upper`.
    public func delay(attempt: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        let (lower, upper) = level(attempt)
        let width = Self.wholeNanoseconds(upper - lower)
        guard width > 0 else { return upper }
        // 1...width: adding at least one nanosecond keeps the draw above `lower`, adding at
        // most `width` (rounded down) keeps it at or below `upper`.
        return lower + .nanoseconds(Int64.random(in: 1...width, using: &generator))
    }

    /// `duration` in whole nanoseconds, rounded down, saturating at `Int64.max`.
    private static func wholeNanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { return seconds < 0 ? 0 : .max }
        let (sum, overflow2) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        return overflow2 ? .max : max(0, sum)
    }
}
