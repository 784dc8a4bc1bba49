/// MQTT quality of service.
public enum QoS: UInt8, Sendable, Hashable, Comparable, CaseIterable, CustomStringConvertible {
    /// At most once: no acknowledgement.
    case atMostOnce = 0
    /// At least once: PUBACK.
    case atLeastOnce = 1
    /// Exactly once: PUBREC / PUBREL / PUBCOMP.
    case exactlyOnce = 2

    public static func < (lhs: QoS, rhs: QoS) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String { "QoS \(rawValue)" }
}
