import IMWire

/// A receipt for a message, on `{prefix}/u/{sender}/receipts`, for all the sender's devices.
///
/// ```json
/// {"by":"bob","device":"phone-2","id":"m-0001","kind":"read","ts":1735689605123}
/// ```
public struct ReceiptPayload: Codable, Hashable, Sendable {
    /// Delivered (a device of the recipient ACKed it) or read.
    public enum Kind: String, Codable, Hashable, Sendable, CaseIterable {
        /// A device of the recipient ACKed the delivery.
        case delivered
        /// The recipient read the message.
        case read

        /// The IMWire receipt kind.
        public var wireKind: IMReceiptKind {
            switch self {
            case .delivered: .delivered
            case .read: .read
            }
        }
    }

    /// Delivered or read.
    public var kind: Kind
    /// The original message's id.
    public var id: String
    /// The recipient of the original message, who received or read it.
    public var by: String
    /// The recipient's device that acknowledged or read it.
    public var device: String?
    /// When the gateway learned it, Unix milliseconds.
    public var ts: UInt64

    /// Creates a receipt payload.
    public init(kind: Kind, id: String, by: String, device: String? = nil, ts: UInt64) {
        self.kind = kind
        self.id = id
        self.by = by
        self.device = device
        self.ts = ts
    }

    /// The RECEIPT_NOTICE for the sender's devices; checks the ids.
    public func notice() throws(PayloadError) -> ReceiptNotice {
        guard IMIdentifier.isValid(self.by) else { throw .invalidField("by", value: self.by) }
        guard IMWire.messageIDLength.contains(self.id.utf8.count) else { throw .invalidField("id", value: self.id) }
        return ReceiptNotice(from: self.by, messageID: self.id, kind: self.kind.wireKind, serverTime: self.ts)
    }
}
