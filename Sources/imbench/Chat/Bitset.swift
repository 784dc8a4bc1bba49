/// A growable set of small non-negative integers (message sequences of one pair).
struct Bitset: Sendable {
    private(set) var words: [UInt64] = []

    /// Inserts `value`; false if it was already there.
    @inline(__always)
    mutating func insert(_ value: Int) -> Bool {
        let (word, bit) = (value >> 6, UInt64(1) << UInt64(value & 63))
        if word >= words.count {
            words.append(contentsOf: repeatElement(0, count: max(word + 1 - words.count, words.count)))
        }
        if words[word] & bit != 0 { return false }
        words[word] |= bit
        return true
    }

    /// Whether `value` is in the set.
    func contains(_ value: Int) -> Bool {
        let word = value >> 6
        return word < words.count && words[word] & (UInt64(1) << UInt64(value & 63)) != 0
    }

    /// How many members of `self` are not in `other`.
    func countMissing(from other: Bitset) -> Int {
        var missing = 0
        for (index, word) in words.enumerated() {
            let theirs = index < other.words.count ? other.words[index] : 0
            missing += (word & ~theirs).nonzeroBitCount
        }
        return missing
    }
}
