/// How ``LeanRecord`` writes numbers and names into keys and values.
extension [UInt8] {
    /// Appends `number`'s low `bytes` bytes, most significant first.
    mutating func appendBigEndian(_ number: UInt64, bytes: Int = 8) {
        for shift in stride(from: (bytes - 1) * 8, through: 0, by: -8) {
            append(UInt8(truncatingIfNeeded: number >> UInt64(shift)))
        }
    }

    /// Appends `name` after its length in one byte.
    mutating func appendName(_ name: String) {
        let count = name.utf8.count
        precondition(count <= 255, "a name of \(count) bytes, over 255: \(name.prefix(40))…")
        append(UInt8(count))
        append(contentsOf: name.utf8)
    }
}
