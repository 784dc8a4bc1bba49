/// MQTT quality of service (tag 0x0205, u8).
public enum IMQoS: UInt8, Hashable, Sendable, CaseIterable, Comparable {
    /// At most once.
    case atMostOnce = 0
    /// At least once.
    case atLeastOnce = 1
    /// Exactly once.
    case exactlyOnce = 2

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
}
