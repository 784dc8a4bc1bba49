import Testing

@testable import IMClient

@Suite("BatchAccumulator: debounce, timeout and maximum count on an injected clock")
struct BatchAccumulatorTests {
    let t0 = ContinuousClock.now

    @Test("the seed's defaults: 350 ms, 5 s, 30")
    func defaults() {
        let policy = BatchPolicy()
        #expect(policy.interval == .milliseconds(350))
        #expect(policy.timeout == .seconds(5))
        #expect(policy.maxCount == 30)
    }

    @Test("empty: no deadline, never due, flush returns nothing")
    func empty() {
        var batch = BatchAccumulator<Int>(policy: BatchPolicy())
        #expect(batch.deadline == nil)
        #expect(!batch.isDue(now: t0 + .seconds(1_000)))
        #expect(batch.flush().isEmpty)
    }

    @Test("debounce: each element moves the deadline to `interval` after it")
    func debounce() {
        var batch = BatchAccumulator<Int>(policy: BatchPolicy())
        #expect(batch.add(1, now: t0) == nil)
        #expect(batch.deadline == t0 + .milliseconds(350))
        #expect(batch.add(2, now: t0 + .milliseconds(300)) == nil)
        #expect(batch.deadline == t0 + .milliseconds(650))
        #expect(!batch.isDue(now: t0 + .milliseconds(649)))
        #expect(batch.isDue(now: t0 + .milliseconds(650)))
        #expect(batch.flush() == [1, 2])
        #expect(batch.deadline == nil)
        #expect(batch.isEmpty)
    }

    @Test("timeout: under continuous arrivals the batch is due `timeout` after its first element")
    func timeoutCap() {
        var batch = BatchAccumulator<Int>(policy: BatchPolicy(maxCount: 1_000))
        // An element every 300 ms: the debounce alone would never fire.
        var element = 0
        var now = t0
        while now < t0 + .seconds(5) {
            #expect(batch.add(element, now: now) == nil)
            #expect(batch.deadline! <= t0 + .seconds(5))
            element += 1
            now = now + .milliseconds(300)
        }
        #expect(batch.deadline == t0 + .seconds(5))
        #expect(batch.isDue(now: t0 + .seconds(5)))
        #expect(batch.flush() == Array(0..<element))
        // The next batch's clock starts at its own first element.
        _ = batch.add(99, now: t0 + .seconds(6))
        #expect(batch.deadline == t0 + .seconds(6) + .milliseconds(350))
    }

    @Test("max count: the element that fills the batch returns it, and a new batch starts")
    func maxCount() {
        var batch = BatchAccumulator<Int>(policy: BatchPolicy(maxCount: 3))
        #expect(batch.add(1, now: t0) == nil)
        #expect(batch.add(2, now: t0) == nil)
        #expect(batch.add(3, now: t0) == [1, 2, 3])
        #expect(batch.isEmpty)
        #expect(batch.deadline == nil)
        #expect(batch.add(4, now: t0 + .seconds(1)) == nil)
        #expect(batch.count == 1)
        #expect(batch.deadline == t0 + .seconds(1) + .milliseconds(350))
    }

    @Test("a timeout shorter than the interval wins from the first element")
    func shortTimeout() {
        var batch = BatchAccumulator<Int>(policy: BatchPolicy(interval: .seconds(1), timeout: .milliseconds(200)))
        _ = batch.add(1, now: t0)
        #expect(batch.deadline == t0 + .milliseconds(200))
    }
}
