/// Which life of an archive an offset belongs to. A store gets one when it is created; a
/// store that is reset or replaced (a new SQLite file, a new PostgreSQL database) has
/// another, so that an offset a device remembers from the old one is never taken for a place
/// in the new one (Centrifugo's "epoch").
///
/// A random number in `1 ..< 2^53`: it fits a JSON number exactly (JavaScript's safe
/// integers), and a TLV u64.
public struct ArchiveEpoch: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The number.
    public let rawValue: UInt64

    /// The largest epoch plus one: 2^53.
    public static let limit: UInt64 = 1 << 53

    /// An epoch from its number; `nil` for 0 or a number of 2^53 or more.
    public init?(rawValue: UInt64) {
        guard rawValue > 0, rawValue < Self.limit else { return nil }
        self.rawValue = rawValue
    }

    /// A new, random epoch.
    public static func random() -> ArchiveEpoch {
        ArchiveEpoch(rawValue: UInt64.random(in: 1..<limit))!
    }

    public var description: String { String(rawValue) }
}
