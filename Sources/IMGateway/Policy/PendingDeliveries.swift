import DequeModule
import NIOCore

/// Deliveries written to a device and not ACKed yet: frame sequence -> MQTT delivery (or
/// offset in the user's stream, for one replayed from the archive), with when each was written, so that the oldest one's age is known at once (the delivery ACK
/// deadline, PROTOCOL.md 6.4).
public struct PendingDeliveries: Sendable {
    /// A chat message's sender and id, for its "delivered" receipt.
    public struct Origin: Sendable, Hashable {
        public var from: String
        public var messageID: String

        public init(from: String, messageID: String) {
            self.from = from
            self.messageID = messageID
        }
    }

    /// One delivery waiting for the device's ACK.
    public struct Entry: Sendable, Hashable {
        /// The MQTT delivery to acknowledge once the device ACKs; `nil` for a message replayed
        /// from the archive.
        public var deliveryID: UInt64?
        /// For a chat delivery: whom to send the "delivered" receipt.
        public var origin: Origin?
        /// Its offset in the user's stream, when the archive stored it.
        public var offset: UInt64? = nil
        /// When it was written.
        public var since: NIODeadline
    }

    private var bySequence: [UInt32: Entry] = [:]
    /// Sequences in the order written; those ACKed out of order are dropped from the front
    /// once everything before them is ACKed too.
    private var order: Deque<UInt32> = []

    public init() {}

    /// How many deliveries wait for their ACK.
    public var count: Int { self.bySequence.count }

    /// When the oldest unACKed delivery was written.
    public var oldest: NIODeadline? { self.order.first.flatMap { self.bySequence[$0]?.since } }

    /// A delivery written with frame sequence `sequence` at `now`.
    public mutating func insert(_ sequence: UInt32, deliveryID: UInt64?, origin: Origin?, offset: UInt64? = nil, now: NIODeadline) {
        if self.bySequence.updateValue(Entry(deliveryID: deliveryID, origin: origin, offset: offset, since: now), forKey: sequence) == nil {
            self.order.append(sequence)
        }
    }

    /// The device ACKed the frame with `sequence`: the delivery it was, if any.
    public mutating func remove(_ sequence: UInt32) -> Entry? {
        guard let entry = self.bySequence.removeValue(forKey: sequence) else { return nil }
        if self.bySequence.isEmpty {
            // Nothing waits: no storage is kept for the next burst (thousands of idle devices).
            self.bySequence = [:]
            self.order = []
        } else {
            while let first = self.order.first, self.bySequence[first] == nil { self.order.removeFirst() }
        }
        return entry
    }
}
