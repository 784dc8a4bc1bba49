#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore

/// The random draws of one connection: xoshiro256** seeded through SplitMix64, so a seed
/// gives the same sequence of latencies, stall and cut times on every run.
struct FaultRandom: RandomNumberGenerator {
    private var state: (UInt64, UInt64, UInt64, UInt64)

    /// A generator whose sequence is fixed by `seed`.
    init(seed: UInt64) {
        var mixer = seed
        state = (Self.splitMix(&mixer), Self.splitMix(&mixer), Self.splitMix(&mixer), Self.splitMix(&mixer))
    }

    /// The generator of connection number `connection` (0, 1, ...) of a proxy started with
    /// `seed`, or a generator seeded from the system when `seed` is nil.
    init(proxySeed seed: UInt64?, connection: Int) {
        guard let seed else {
            var system = SystemRandomNumberGenerator()
            self.init(seed: system.next())
            return
        }
        var mixer = seed ^ (UInt64(truncatingIfNeeded: connection) &* 0x9E37_79B9_7F4A_7C15)
        self.init(seed: Self.splitMix(&mixer))
    }

    mutating func next() -> UInt64 {
        let result = Self.rotate(state.1 &* 5, 7) &* 9
        let shifted = state.1 << 17
        state.2 ^= state.0
        state.3 ^= state.1
        state.1 ^= state.2
        state.0 ^= state.3
        state.2 ^= shifted
        state.3 = Self.rotate(state.3, 45)
        return result
    }

    /// A time drawn uniformly from `range`; negative bounds count as zero.
    mutating func uniform(_ range: ClosedRange<Duration>) -> TimeAmount {
        let lower = max(0, range.lowerBound.clampedNanoseconds)
        let upper = max(lower, range.upperBound.clampedNanoseconds)
        return .nanoseconds(Int64.random(in: lower ... upper, using: &self))
    }

    /// The time to the next event of a Poisson process with `perMinute` events a minute (an
    /// exponential draw), at most a day.
    mutating func exponential(perMinute: Double) -> TimeAmount {
        let unit = Double.random(in: 0 ..< 1, using: &self)
        let seconds = -log1p(-unit) * 60 / perMinute
        let nanoseconds = min(seconds * 1e9, 86_400e9)
        return .nanoseconds(Int64(nanoseconds))
    }

    private static func splitMix(_ state: inout UInt64) -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    private static func rotate(_ value: UInt64, _ count: UInt64) -> UInt64 {
        (value << count) | (value >> (64 - count))
    }
}

extension Duration {
    /// The duration in nanoseconds, saturating at the bounds of `Int64`.
    var clampedNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, overflowSum) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        if overflowSum { return seconds < 0 ? .min : .max }
        return sum
    }
}
