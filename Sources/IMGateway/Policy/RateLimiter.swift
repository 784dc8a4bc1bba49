/// A token bucket: up to `burst` requests at once, refilled at `ratePerSecond`.
///
/// Time is injected as seconds (any monotonic clock); the bucket starts full. A clock that
/// steps back refills nothing until it has caught up.
///
/// ```swift
/// var limiter = RateLimiter(ratePerSecond: config.location.maxUpdatesPerSecond, burst: 3)
/// guard limiter.allow(now: now) else { return nack(.rateLimited) }
/// ```
public struct RateLimiter: Sendable, Hashable {
    /// Tokens added per second.
    public let ratePerSecond: Double
    /// The bucket's size: how many requests may come back to back.
    public let burst: Double

    private var tokens: Double
    private var updatedAt: Double?

    /// Creates a full bucket. `ratePerSecond` 0 makes `burst` a fixed quota.
    public init(ratePerSecond: Double, burst: Double) {
        precondition(ratePerSecond >= 0 && ratePerSecond.isFinite, "rate must be a finite number >= 0")
        precondition(burst >= 1 && burst.isFinite, "burst must be at least 1")
        self.ratePerSecond = ratePerSecond
        self.burst = burst
        self.tokens = burst
    }

    /// Takes `cost` tokens if there are enough at `now` and says whether it did.
    public mutating func allow(now: Double, cost: Double = 1) -> Bool {
        self.refill(now: now)
        guard self.tokens >= cost else { return false }
        self.tokens -= cost
        return true
    }

    /// Tokens available at `now`.
    public mutating func available(now: Double) -> Double {
        self.refill(now: now)
        return self.tokens
    }

    private mutating func refill(now: Double) {
        if let updatedAt {
            guard now > updatedAt else { return }
            self.tokens = min(self.burst, self.tokens + (now - updatedAt) * self.ratePerSecond)
        }
        self.updatedAt = now
    }
}
