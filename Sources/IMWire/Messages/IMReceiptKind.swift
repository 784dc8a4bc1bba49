/// The kind of a receipt (tag 0x0206, u8).
public enum IMReceiptKind: UInt8, Hashable, Sendable, CaseIterable {
    /// A device of the recipient ACKed the delivery.
    case delivered = 1
    /// The recipient read the message.
    case read = 2
}
