import NIOCore
import Testing

@testable import FaultProxy

/// The delay line alone, with made-up times.
@Suite("DelayLine")
struct DelayLineTests {
    let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    /// Drains `line` in time order; returns the chunks with the time each became due.
    func drain(_ line: inout DelayLine) -> [(due: NIODeadline, bytes: [UInt8])] {
        var out: [(NIODeadline, [UInt8])] = []
        while let due = line.nextDue, !line.isEmpty {
            while var chunk = line.popDue(now: due) {
                out.append((due, chunk.readBytes(length: chunk.readableBytes)!))
            }
        }
        return out
    }

    @Test("random latencies never reorder chunks, and due times never decrease")
    func orderIsKept() {
        var random = FaultRandom(seed: 5)
        var line = DelayLine()
        for index in 0 ..< 500 {
            let arrival = start + .milliseconds(Int64(index))
            let latency = random.uniform(.milliseconds(200) ... .milliseconds(800))
            line.enqueue(ByteBuffer(bytes: bigEndian(index)), arrival: arrival, latency: latency, bandwidth: nil)
        }
        #expect(line.queuedBytes == 2000)
        let out = drain(&line)
        #expect(out.flatMap(\.bytes) == (0 ..< 500).flatMap(bigEndian))
        #expect(zip(out, out.dropFirst()).allSatisfy { $0.due <= $1.due })
        #expect(line.queuedBytes == 0)
    }

    @Test("a chunk is due at arrival + latency, or after the previous one")
    func dueTimes() {
        var line = DelayLine()
        line.enqueue(ByteBuffer(bytes: [1]), arrival: start, latency: .milliseconds(500), bandwidth: nil)
        line.enqueue(ByteBuffer(bytes: [2]), arrival: start + .milliseconds(10), latency: .milliseconds(100), bandwidth: nil)
        line.enqueue(ByteBuffer(bytes: [3]), arrival: start + .milliseconds(600), latency: .milliseconds(100), bandwidth: nil)
        #expect(line.popDue(now: start + .milliseconds(499)) == nil)
        #expect(line.popDue(now: start + .milliseconds(500)) == ByteBuffer(bytes: [1]))
        #expect(line.popDue(now: start + .milliseconds(500)) == ByteBuffer(bytes: [2]))
        #expect(line.nextDue == start + .milliseconds(700))
        #expect(line.popDue(now: start + .milliseconds(699)) == nil)
        #expect(line.popDue(now: start + .milliseconds(700)) == ByteBuffer(bytes: [3]))
        #expect(line.nextDue == nil)
    }

    @Test("a bandwidth limit spreads a chunk over time")
    func bandwidth() {
        var line = DelayLine()
        let bytes = pattern(10_000)
        line.enqueue(ByteBuffer(bytes: bytes), arrival: start, latency: .milliseconds(100), bandwidth: 1_000)
        let out = drain(&line)
        #expect(out.flatMap(\.bytes) == bytes)
        #expect(out.count == 10_000 / 512 + 1)                          // slices of 512 bytes
        #expect(out.first!.due == start + .milliseconds(512 + 100))      // 512 bytes at 1 kB/s
        #expect(out.last!.due == start + .milliseconds(10_000 + 100))    // all of it: 10 s
    }

    @Test("the close comes after the last chunk, with its own latency")
    func end() {
        var line = DelayLine()
        line.enqueue(ByteBuffer(bytes: [1]), arrival: start, latency: .milliseconds(500), bandwidth: nil)
        line.enqueueEnd(arrival: start, latency: .milliseconds(100))
        #expect(!line.isFinished(now: start + .milliseconds(600)))   // the chunk is still there
        _ = line.popDue(now: start + .milliseconds(500))
        #expect(line.isFinished(now: start + .milliseconds(500)))
        line.enqueue(ByteBuffer(bytes: [2]), arrival: start, latency: .zero, bandwidth: nil)
        #expect(line.isEmpty)   // nothing after the close

        var idle = DelayLine()
        idle.enqueueEnd(arrival: start, latency: .milliseconds(300))
        #expect(idle.nextDue == start + .milliseconds(300))
        #expect(!idle.isFinished(now: start + .milliseconds(299)))
        #expect(idle.isFinished(now: start + .milliseconds(300)))
    }

    @Test("removeAll drops the chunks and says how many bytes")
    func removeAll() {
        var line = DelayLine()
        line.enqueue(ByteBuffer(bytes: pattern(100)), arrival: start, latency: .seconds(1), bandwidth: nil)
        line.enqueue(ByteBuffer(bytes: pattern(50)), arrival: start, latency: .seconds(1), bandwidth: nil)
        #expect(line.removeAll() == 150)
        #expect(line.isEmpty && line.queuedBytes == 0 && line.nextDue == nil)
    }
}

/// The seeded random draws.
@Suite("FaultRandom")
struct FaultRandomTests {
    @Test("a seed fixes the sequence; connections of one seed differ")
    func reproducible() {
        var first = FaultRandom(proxySeed: 42, connection: 0)
        var again = FaultRandom(proxySeed: 42, connection: 0)
        var other = FaultRandom(proxySeed: 42, connection: 1)
        let a = (0 ..< 16).map { _ in first.next() }
        #expect(a == (0 ..< 16).map { _ in again.next() })
        #expect(a != (0 ..< 16).map { _ in other.next() })
    }

    @Test("uniform draws stay in range")
    func uniform() {
        var random = FaultRandom(seed: 1)
        let range = Duration.milliseconds(200) ... .milliseconds(800)
        let draws = (0 ..< 10_000).map { _ in random.uniform(range) }
        #expect(draws.allSatisfy { $0 >= .milliseconds(200) && $0 <= .milliseconds(800) })
        #expect(draws.contains { $0 < .milliseconds(250) } && draws.contains { $0 > .milliseconds(750) })
        #expect(random.uniform(.seconds(1) ... .seconds(1)) == .seconds(1))
    }

    @Test("exponential draws have the mean of the rate")
    func exponential() {
        var random = FaultRandom(seed: 3)
        let draws = (0 ..< 20_000).map { _ in random.exponential(perMinute: 6) }   // mean 10 s
        let mean = Double(draws.reduce(Int64(0)) { $0 + $1.nanoseconds }) / Double(draws.count) / 1e9
        #expect(abs(mean - 10) < 0.5)
        #expect(draws.allSatisfy { $0 >= .zero })
    }

    @Test("profiles: none and weak")
    func profiles() {
        #expect(FaultProfile.none.latency == nil)
        #expect(FaultProfile.none.effectiveStallRate == nil && FaultProfile.none.effectiveCutRate == nil)
        let weak = FaultProfile.weak()
        #expect(weak.latency == .milliseconds(200) ... .milliseconds(800))
        #expect(weak.stallsPerMinute > 0 && weak.cutsPerMinute > 0)
        var odd = FaultProfile(stallsPerMinute: -1, cutsPerMinute: .nan, bandwidth: 0)
        #expect(odd.effectiveStallRate == nil && odd.effectiveCutRate == nil && odd.effectiveBandwidth == nil)
        odd.bandwidth = 10
        #expect(odd.effectiveBandwidth == 10)
    }
}
