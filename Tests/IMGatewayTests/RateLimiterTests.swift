import IMGateway
import Testing

@Suite("RateLimiter")
struct RateLimiterTests {
    /// What `allow` answers at each time, in order.
    static func answers(_ limiter: inout RateLimiter, _ times: [Double], cost: Double = 1) -> [Bool] {
        times.map { limiter.allow(now: $0, cost: cost) }
    }

    @Test("a full bucket allows a burst, then the rate")
    func burstThenRate() {
        var limiter = RateLimiter(ratePerSecond: 1, burst: 3)
        #expect(Self.answers(&limiter, [100, 100, 100, 100, 100.5, 101, 101]) == [true, true, true, false, false, true, false])
        // A long pause refills only up to the burst.
        #expect(Self.answers(&limiter, [1000, 1000, 1000, 1000]) == [true, true, true, false])
    }

    @Test("fractional rates and costs")
    func fractional() {
        var limiter = RateLimiter(ratePerSecond: 0.2, burst: 1)
        #expect(Self.answers(&limiter, [0, 4.9, 5]) == [true, false, true])
        var bytes = RateLimiter(ratePerSecond: 100, burst: 1000)
        #expect(Self.answers(&bytes, [0], cost: 800) == [true])
        #expect(Self.answers(&bytes, [0, 1], cost: 300) == [false, true])
        let left = bytes.available(now: 1)
        #expect(left == 0)
    }

    @Test("a clock stepping back refills nothing; rate 0 is a fixed quota")
    func clockAndQuota() {
        var limiter = RateLimiter(ratePerSecond: 1, burst: 1)
        #expect(Self.answers(&limiter, [10, 5, 10.5, 11]) == [true, false, false, true])
        var quota = RateLimiter(ratePerSecond: 0, burst: 2)
        #expect(Self.answers(&quota, [0, 1, 1_000_000]) == [true, true, false])
    }
}
