extension HistoryPlan {
    /// Message `index` as `imbench rocksdb` stores it: `imbench history`'s sender, recipient and
    /// server time, the sender's device "phone", a UUID-like message id and a fingerprint drawn
    /// from the index (the same on every run), and `body`.
    func leanChat(_ index: Int, body: [UInt8]) -> RocksDBArchive.Chat {
        let (sender, recipient) = participants(index)
        var mixer = SplitMix(seed: UInt64(index) ^ 0x6C65_616E_6368_6174)
        let id = Self.uuidText(mixer.next(), mixer.next())
        return RocksDBArchive.Chat(
            sender: name(sender), recipient: name(recipient), origin: "phone", messageID: id, fingerprint: mixer.next(),
            serverTime: time(index), body: body)
    }

    /// 128 bits written as a version-4 UUID is (8-4-4-4-12 lowercase hex digits, the version
    /// and variant bits set).
    static func uuidText(_ high: UInt64, _ low: UInt64) -> String {
        let high: UInt64 = (high & ~UInt64(0xF000)) | UInt64(0x4000)
        let low: UInt64 = (low & UInt64(0x3FFF_FFFF_FFFF_FFFF)) | UInt64(0x8000_0000_0000_0000)
        return String(unsafeUninitializedCapacity: 36) { text in
            var position = 0
            for word in [high, low] {
                for nibble in 0..<16 {
                    if position == 8 || position == 13 || position == 18 || position == 23 {
                        text[position] = UInt8(ascii: "-")
                        position += 1
                    }
                    let shift = UInt64(60 - 4 * nibble)
                    let digit = Int(truncatingIfNeeded: (word >> shift) & 0xF)
                    text[position] = hexDigits[digit]
                    position += 1
                }
            }
            return position
        }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)
}
