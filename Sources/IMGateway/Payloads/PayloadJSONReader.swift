import IMWire

/// Reads the JSON of a fixed-shape payload without building a tree first: objects, arrays,
/// strings and integers, the values the gateway's own payloads use.
///
/// It is a fast path, not a validator of its own: every method returns `nil` or `false` as
/// soon as the input leaves what it handles (a fraction or exponent, `null`, a key with an
/// escape, a duplicate key, invalid UTF-8, anything malformed), and the caller then decodes
/// with Foundation's `JSONDecoder`, which accepts or refuses the input and says why. So the
/// payloads it reads decode exactly as they would through Foundation.
struct PayloadJSONReader {
    private let input: UnsafeBufferPointer<UInt8>
    private var index = 0

    private init(_ input: UnsafeBufferPointer<UInt8>) {
        self.input = input
    }

    /// Runs `body` over `bytes`; its result, if it read one whole JSON value and nothing but
    /// whitespace follows.
    static func read<T>(_ bytes: [UInt8], _ body: (inout PayloadJSONReader) -> T?) -> T? {
        bytes.withUnsafeBufferPointer { input in
            var reader = PayloadJSONReader(input)
            guard let value = body(&reader) else { return nil }
            reader.skipWhitespace()
            return reader.index == input.count ? value : nil
        }
    }

    /// Reads an object: `member` is called with each key (as raw bytes) and must read the
    /// value. Keys containing escapes end the fast path.
    mutating func object(_ member: (UnsafeBufferPointer<UInt8>, inout PayloadJSONReader) -> Bool) -> Bool {
        guard consume(UInt8(ascii: "{")) else { return false }
        if consume(UInt8(ascii: "}")) { return true }
        repeat {
            guard let key = rawKey(), consume(UInt8(ascii: ":")), member(key, &self) else { return false }
            if consume(UInt8(ascii: "}")) { return true }
        } while consume(UInt8(ascii: ","))
        return false
    }

    /// Reads an array, calling `element` for each element (it must read it).
    mutating func array(_ element: (inout PayloadJSONReader) -> Bool) -> Bool {
        guard consume(UInt8(ascii: "[")) else { return false }
        if consume(UInt8(ascii: "]")) { return true }
        repeat {
            guard element(&self) else { return false }
            if consume(UInt8(ascii: "]")) { return true }
        } while consume(UInt8(ascii: ","))
        return false
    }

    /// Reads a string, unescaping it; `nil` if it is not valid JSON or not valid UTF-8.
    mutating func string() -> String? {
        guard consume(UInt8(ascii: "\"")) else { return nil }
        let start = index
        while index < input.count {
            let byte = input[index]
            if byte == UInt8(ascii: "\"") {
                let string = UTF8Text.decode(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: input[start..<index])))
                index += 1
                return string
            }
            if byte == UInt8(ascii: "\\") { return escapedString(from: start) }
            if byte < 0x20 { return nil }
            index += 1
        }
        return nil
    }

    /// Reads `true` or `false`.
    mutating func bool() -> Bool? {
        skipWhitespace()
        for (literal, value) in [("true", true), ("false", false)] {
            let utf8 = Array(literal.utf8)
            if input.count - index >= utf8.count, input[index..<(index + utf8.count)].elementsEqual(utf8) {
                index += utf8.count
                return value
            }
        }
        return nil
    }

    /// Reads a non-negative integer written without fraction or exponent.
    mutating func unsignedInteger() -> UInt64? {
        skipWhitespace()
        let start = index
        var value: UInt64 = 0
        while index < input.count, input[index] >= UInt8(ascii: "0"), input[index] <= UInt8(ascii: "9") {
            let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.addingReportingOverflow(UInt64(input[index] - UInt8(ascii: "0")))
            guard !overflow1, !overflow2 else { return nil }
            value = sum
            index += 1
        }
        let count = index - start
        // No digits, or a leading zero (invalid JSON); a fraction or exponent follows: not ours.
        guard count > 0, !(count > 1 && input[start] == UInt8(ascii: "0")) else { return nil }
        if index < input.count, input[index] == UInt8(ascii: ".") || input[index] | 0x20 == UInt8(ascii: "e") { return nil }
        return value
    }

    /// Reads an integer written without fraction or exponent.
    mutating func integer() -> Int? {
        skipWhitespace()
        let negative = consume(UInt8(ascii: "-"), skippingWhitespace: false)
        guard let magnitude = unsignedInteger() else { return nil }
        if negative {
            return magnitude <= UInt64(Int.max) + 1 ? Int(truncatingIfNeeded: 0 &- magnitude) : nil
        }
        return magnitude <= UInt64(Int.max) ? Int(magnitude) : nil
    }

    // MARK: Internals

    private mutating func rawKey() -> UnsafeBufferPointer<UInt8>? {
        guard consume(UInt8(ascii: "\"")) else { return nil }
        let start = index
        while index < input.count {
            let byte = input[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return UnsafeBufferPointer(rebasing: input[start..<(index - 1)])
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { return nil }
            index += 1
        }
        return nil
    }

    /// The rest of a string that contains an escape; `index` is at the first backslash.
    private mutating func escapedString(from start: Int) -> String? {
        var bytes = Array(input[start..<index])
        while index < input.count {
            let byte = input[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return bytes.withUnsafeBytes { UTF8Text.decode($0) }
            case UInt8(ascii: "\\"):
                guard index < input.count else { return nil }
                let escaped = input[index]
                index += 1
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): bytes.append(escaped)
                case UInt8(ascii: "b"): bytes.append(0x08)
                case UInt8(ascii: "f"): bytes.append(0x0C)
                case UInt8(ascii: "n"): bytes.append(0x0A)
                case UInt8(ascii: "r"): bytes.append(0x0D)
                case UInt8(ascii: "t"): bytes.append(0x09)
                case UInt8(ascii: "u"):
                    guard let scalar = unicodeEscape() else { return nil }
                    bytes.append(contentsOf: String(Character(scalar)).utf8)
                default:
                    return nil
                }
            default:
                if byte < 0x20 { return nil }
                bytes.append(byte)
            }
        }
        return nil
    }

    /// The scalar of `\uXXXX` (after the `u`), joining a surrogate pair written as two
    /// escapes; `nil` for a lone surrogate.
    private mutating func unicodeEscape() -> Unicode.Scalar? {
        guard let first = hex4() else { return nil }
        switch first {
        case 0xD800...0xDBFF:
            guard consume(UInt8(ascii: "\\"), skippingWhitespace: false), consume(UInt8(ascii: "u"), skippingWhitespace: false),
                  let second = hex4(), (0xDC00...0xDFFF).contains(second)
            else { return nil }
            return Unicode.Scalar(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))
        case 0xDC00...0xDFFF:
            return nil
        default:
            return Unicode.Scalar(first)
        }
    }

    private mutating func hex4() -> UInt32? {
        guard index + 4 <= input.count else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = input[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    private mutating func skipWhitespace() {
        while index < input.count {
            switch input[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    /// Skips whitespace (unless told not to), then takes `byte` if it comes next.
    private mutating func consume(_ byte: UInt8, skippingWhitespace: Bool = true) -> Bool {
        if skippingWhitespace { skipWhitespace() }
        guard index < input.count, input[index] == byte else { return false }
        index += 1
        return true
    }
}

extension PayloadJSONReader {
    /// Stores a member's value in `slot`; false (leave it to Foundation) when the value was
    /// not read or the key came twice.
    static func fill<T>(_ slot: inout T?, with value: T?) -> Bool {
        guard slot == nil, let value else { return false }
        slot = value
        return true
    }
}

extension UnsafeBufferPointer<UInt8> {
    /// The bytes spell `key`.
    func spells(_ key: StaticString) -> Bool {
        key.withUTF8Buffer { self.elementsEqual($0) }
    }
}
