/// The latencies of the last ten seconds, for a percentile that moves with the traffic (the
/// console's p99 of the chat path, `/v1/stats`): one histogram per second in a ring, log-linear
/// buckets of microseconds (8 per power of two: a value is known within 12.5%). Recording is a
/// few integer operations; nothing is allocated after `init`.
struct LatencyWindow: Sendable {
    /// Seconds kept.
    static let seconds = 10
    /// Buckets per power of two.
    private static let subBuckets = 8
    /// Powers of two covered: up to 2^32 µs (over an hour); longer ones count in the last bucket.
    private static let powers = 32
    private static let bucketCount = subBuckets * powers

    /// The counts of each second, `seconds` of them, `bucketCount` each.
    private var counts: [UInt32]
    /// The second each slot holds (nil: none yet).
    private var slotSecond: [Int64?]

    init() {
        counts = Array(repeating: 0, count: Self.seconds * Self.bucketCount)
        slotSecond = Array(repeating: nil, count: Self.seconds)
    }

    /// Records `microseconds`, measured at `second` (any monotonic count of seconds).
    mutating func record(microseconds: UInt64, second: Int64) {
        let slot = Int(second.remainderReportingOverflow(dividingBy: Int64(Self.seconds)).partialValue + Int64(Self.seconds)) % Self.seconds
        if slotSecond[slot] != second {
            slotSecond[slot] = second
            let start = slot * Self.bucketCount
            for index in start..<(start + Self.bucketCount) { counts[index] = 0 }
        }
        let index = slot * Self.bucketCount + Self.bucket(of: microseconds)
        counts[index] &+= 1
    }

    /// The `fraction` percentile (0.99 for p99) of what was recorded in the ten seconds up to
    /// `second`, in microseconds (the upper bound of its bucket), or nil if nothing was.
    func percentile(_ fraction: Double, second: Int64) -> UInt64? {
        var merged = [UInt64](repeating: 0, count: Self.bucketCount)
        var total: UInt64 = 0
        for slot in 0..<Self.seconds {
            guard let recorded = slotSecond[slot], recorded > second - Int64(Self.seconds), recorded <= second else { continue }
            for bucket in 0..<Self.bucketCount {
                let count = UInt64(counts[slot * Self.bucketCount + bucket])
                merged[bucket] += count
                total += count
            }
        }
        guard total > 0 else { return nil }
        let rank = max(1, UInt64((Double(total) * fraction).rounded(.up)))
        var seen: UInt64 = 0
        for bucket in 0..<Self.bucketCount {
            seen += merged[bucket]
            if seen >= rank { return Self.upperBound(of: bucket) }
        }
        return Self.upperBound(of: Self.bucketCount - 1)
    }

    /// The bucket of `value`: values below 8 have one each; above, 8 per power of two.
    static func bucket(of value: UInt64) -> Int {
        if value < UInt64(subBuckets) { return Int(value) }
        let power = 63 - value.leadingZeroBitCount  // 3 or more
        let sub = Int((value >> UInt64(power - 3)) & 7)
        return min((power - 2) * subBuckets + sub, bucketCount - 1)
    }

    /// The largest value of `bucket`.
    static func upperBound(of bucket: Int) -> UInt64 {
        if bucket < subBuckets { return UInt64(bucket) }
        let power = bucket / subBuckets + 2
        let sub = UInt64(bucket % subBuckets)
        return ((8 + sub + 1) << UInt64(power - 3)) - 1
    }
}
