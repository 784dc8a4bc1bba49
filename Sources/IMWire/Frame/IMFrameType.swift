/// The frame type, header bytes 6–7. It names how a frame is acknowledged; the
/// operation inside DATA and CONTROL frames is named by the ``IMTag/operation`` item.
public enum IMFrameType: UInt16, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    /// User content the receiver acknowledges with an ``ack``: chat, delivery, publish.
    case data = 0
    /// Liveness probe with an empty body, answered by an ``ack`` echoing its sequence.
    case heartbeat = 1
    /// Acknowledgement: the header sequence is the acknowledged frame's sequence.
    case ack = 2
    /// Session control: requests, replies and notifications named by an operation.
    case control = 3
    /// Delivery and read receipts, acknowledged like ``data``.
    case readReceipt = 4

    /// The upper-case name used in the protocol document, e.g. `READ_RECEIPT`.
    public var description: String {
        switch self {
        case .data: "DATA"
        case .heartbeat: "HEARTBEAT"
        case .ack: "ACK"
        case .control: "CONTROL"
        case .readReceipt: "READ_RECEIPT"
        }
    }
}
