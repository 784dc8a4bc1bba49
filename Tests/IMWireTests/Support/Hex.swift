import NIOCore

// MARK: - Hex

func hexString(_ buffer: ByteBuffer) -> String {
    hexString(buffer.readableBytesView)
}

func hexString(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789ABCDEF".utf8)
    var out: [UInt8] = []
    for byte in bytes {
        out.append(digits[Int(byte >> 4)])
        out.append(digits[Int(byte & 0xF)])
    }
    return String(decoding: out, as: UTF8.self)
}

func hexString<T: BinaryInteger>(_ value: T, width: Int) -> String {
    let digits = String(value, radix: 16, uppercase: true)
    return String(repeating: "0", count: max(0, width - digits.count)) + digits
}

func bytes(fromHex hex: String) throws -> [UInt8] {
    let clean = hex.filter { !$0.isWhitespace }
    guard clean.count % 2 == 0 else { throw VectorError.badHex(hex) }
    var result: [UInt8] = []
    result.reserveCapacity(clean.count / 2)
    var index = clean.startIndex
    while index < clean.endIndex {
        let next = clean.index(index, offsetBy: 2)
        guard let byte = UInt8(clean[index..<next], radix: 16) else { throw VectorError.badHex(hex) }
        result.append(byte)
        index = next
    }
    return result
}

func buffer(fromHex hex: String) throws -> ByteBuffer {
    ByteBuffer(bytes: try bytes(fromHex: hex))
}
