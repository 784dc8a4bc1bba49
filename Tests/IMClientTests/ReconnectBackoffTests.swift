import Testing

@testable import IMClient

@Suite("ReconnectBackoff: exponential levels with jitter")
struct ReconnectBackoffTests {
    static let defaultLevels: [(attempt: Int, lower: Duration, upper: Duration)] = [
        (0, .zero, .seconds(1)),
        (1, .seconds(1), .seconds(2)),
        (2, .seconds(2), .seconds(4)),
        (3, .seconds(4), .seconds(8)),
        (4, .seconds(8), .seconds(16)),
        (5, .seconds(16), .seconds(32)),
        (6, .seconds(16), .seconds(32)),
        (7, .seconds(16), .seconds(32)),
    ]

    @Test("the default levels: (0,1], (1,2], (2,4], (4,8], (8,16], then (16,32] for good", arguments: defaultLevels)
    func defaultLevel(attempt: Int, lower: Duration, upper: Duration) {
        let backoff = ReconnectBackoff()
        #expect(backoff.base == .seconds(1))
        #expect(backoff.cap == .seconds(32))
        let level = backoff.level(attempt)
        #expect(level.lower == lower)
        #expect(level.upper == upper)
    }

    @Test("a negative attempt is level 0")
    func negativeAttempt() {
        let level = ReconnectBackoff().level(-3)
        #expect(level.lower == .zero)
        #expect(level.upper == .seconds(1))
    }

    @Test("draws stay inside (lower, upper] at every level", arguments: 0...7)
    func drawsInsideLevel(attempt: Int) {
        let backoff = ReconnectBackoff()
        let (lower, upper) = backoff.level(attempt)
        var generator = SeededGenerator(seed: UInt64(attempt) + 1)
        for _ in 0..<5_000 {
            let delay = backoff.delay(attempt: attempt, using: &generator)
            #expect(delay > lower, "attempt \(attempt): \(delay) not above \(lower)")
            #expect(delay <= upper, "attempt \(attempt): \(delay) above \(upper)")
        }
    }

    @Test("draws spread over the whole level: every quarter gets its share", arguments: 0...6)
    func drawsSpread(attempt: Int) {
        let backoff = ReconnectBackoff()
        let (lower, upper) = backoff.level(attempt)
        let width = upper - lower
        var generator = SeededGenerator(seed: 42 &+ UInt64(attempt))
        var quarters = [0, 0, 0, 0]
        let draws = 4_000
        for _ in 0..<draws {
            let fraction = (backoff.delay(attempt: attempt, using: &generator) - lower) / width
            quarters[min(3, Int(fraction * 4))] += 1
        }
        // Uniform: about 1000 each. A draw stuck at one end (e.g. always `upper`) fails this.
        for count in quarters {
            #expect(count > draws / 4 - 200 && count < draws / 4 + 200, "quarters: \(quarters)")
        }
        // Both halves of the level are hit.
        #expect(quarters[0] + quarters[1] > 0)
        #expect(quarters[2] + quarters[3] > 0)
    }

    @Test("the cap holds for huge attempts, without overflow", arguments: [50, 63, 64, 1_000, Int.max - 1, Int.max])
    func capForHugeAttempts(attempt: Int) {
        let backoff = ReconnectBackoff()
        let level = backoff.level(attempt)
        #expect(level.lower == .seconds(16))
        #expect(level.upper == .seconds(32))
        var generator = SeededGenerator(seed: 7)
        for _ in 0..<200 {
            let delay = backoff.delay(attempt: attempt, using: &generator)
            #expect(delay > .seconds(16) && delay <= .seconds(32))
        }
    }

    @Test("a custom base and cap scale the levels; a cap between powers of two tops the last level")
    func customBaseAndCap() {
        let half = ReconnectBackoff(base: .milliseconds(500), cap: .seconds(8))
        #expect(half.level(0) == (.zero, .milliseconds(500)))
        #expect(half.level(1) == (.milliseconds(500), .seconds(1)))
        #expect(half.level(4) == (.seconds(4), .seconds(8)))
        #expect(half.level(5) == (.seconds(4), .seconds(8)))

        let odd = ReconnectBackoff(base: .seconds(1), cap: .seconds(30))
        #expect(odd.level(4) == (.seconds(8), .seconds(16)))
        #expect(odd.level(5) == (.seconds(15), .seconds(30)))
        #expect(odd.level(99) == (.seconds(15), .seconds(30)))

        // A cap below the base: every level is capped.
        let tight = ReconnectBackoff(base: .seconds(10), cap: .seconds(4))
        #expect(tight.level(0) == (.zero, .seconds(4)))
        #expect(tight.level(3) == (.seconds(2), .seconds(4)))

        var generator = SeededGenerator(seed: 3)
        for attempt in 0..<10 {
            let (lower, upper) = half.level(attempt)
            for _ in 0..<500 {
                let delay = half.delay(attempt: attempt, using: &generator)
                #expect(delay > lower && delay <= upper)
            }
        }
    }

    @Test("the levels only grow with the attempt")
    func monotonic() {
        for backoff in [ReconnectBackoff(), ReconnectBackoff(base: .milliseconds(300), cap: .seconds(45))] {
            for attempt in 0..<20 {
                let this = backoff.level(attempt)
                let next = backoff.level(attempt + 1)
                #expect(next.lower >= this.lower)
                #expect(next.upper >= this.upper)
            }
        }
    }

    @Test("the same seed gives the same delays; the generator is really used")
    func deterministic() {
        let backoff = ReconnectBackoff()
        var first = SeededGenerator(seed: 99)
        var second = SeededGenerator(seed: 99)
        let a = (0..<20).map { backoff.delay(attempt: $0 % 6, using: &first) }
        let b = (0..<20).map { backoff.delay(attempt: $0 % 6, using: &second) }
        #expect(a == b)
        var other = SeededGenerator(seed: 100)
        let c = (0..<20).map { backoff.delay(attempt: $0 % 6, using: &other) }
        #expect(a != c)
        #expect(Set(a).count == a.count)  // jitter: no two equal
    }
}
