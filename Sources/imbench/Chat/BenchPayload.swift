/// The content of a benchmark message: `SEQUENCE SENT_AT ` in ASCII decimal (sent at:
/// ``MonotonicClock/nanoseconds()`` of this process), then `x` up to the requested size.
enum BenchPayload {
    /// The payload bytes: at least the two numbers, padded to `size`.
    static func make(sequence: Int, sentAt: UInt64, size: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(max(size, 32))
        appendDecimal(UInt64(sequence), to: &bytes)
        bytes.append(0x20)
        appendDecimal(sentAt, to: &bytes)
        bytes.append(0x20)
        if bytes.count < size { bytes.append(contentsOf: repeatElement(UInt8(ascii: "x"), count: size - bytes.count)) }
        return bytes
    }

    /// Sequence and send time of a payload made by ``make(sequence:sentAt:size:)``.
    static func parse(_ bytes: some Sequence<UInt8>) -> (sequence: Int, sentAt: UInt64)? {
        var numbers: [UInt64] = []
        var current: UInt64 = 0
        var digits = 0
        for byte in bytes {
            if byte >= 0x30 && byte <= 0x39 {
                current = current &* 10 &+ UInt64(byte - 0x30)
                digits += 1
            } else {
                guard digits > 0 else { return nil }
                numbers.append(current)
                if numbers.count == 2 { break }
                current = 0
                digits = 0
            }
        }
        guard numbers.count == 2 else { return nil }
        return (Int(numbers[0]), numbers[1])
    }

    private static func appendDecimal(_ value: UInt64, to bytes: inout [UInt8]) {
        if value == 0 {
            bytes.append(0x30)
            return
        }
        var digits: [UInt8] = []
        var rest = value
        while rest > 0 {
            digits.append(UInt8(rest % 10) + 0x30)
            rest /= 10
        }
        bytes.append(contentsOf: digits.reversed())
    }
}
