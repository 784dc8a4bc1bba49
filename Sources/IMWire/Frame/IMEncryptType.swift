/// The encrypt type, header byte 16. Only "no encryption" exists; AES (2) is refused.
public enum IMEncryptType: UInt8, Hashable, Sendable, CaseIterable {
    /// No encryption.
    case none = 0
    /// What the seed client sends (it calls it "CRC32"); it also means no encryption.
    case seedCRC32 = 1
}
