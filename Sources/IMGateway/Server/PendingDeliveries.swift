import Synchronization

/// Deliveries written to a device and not ACKed yet: frame sequence -> MQTT delivery, with
/// when it was written. Kept by the connection, read by the ``DeliveryWatchdog``.
final class PendingDeliveries: Sendable {
    /// A chat message's sender and id, for its "delivered" receipt.
    struct Origin: Sendable {
        var from: String
        var messageID: String
    }

    private let pending = Mutex<[UInt32: (deliveryID: UInt64, origin: Origin?, since: ContinuousClock.Instant)]>([:])

    func insert(_ sequence: UInt32, _ deliveryID: UInt64, origin: Origin? = nil) {
        pending.withLock { $0[sequence] = (deliveryID, origin, .now) }
    }

    func remove(_ sequence: UInt32) -> (deliveryID: UInt64, origin: Origin?)? {
        pending.withLock { $0.removeValue(forKey: sequence).map { ($0.deliveryID, $0.origin) } }
    }

    /// How long the oldest unACKed delivery has waited.
    var oldestAge: Duration? {
        pending.withLock { $0.values.map(\.since).min() }.map { .now - $0 }
    }
}
