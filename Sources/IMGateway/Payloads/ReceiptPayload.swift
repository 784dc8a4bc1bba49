import IMWire

/// A receipt for a message, on `{prefix}/u/{sender}/receipts`, for all the sender's devices.
///
/// ```json
/// {"by":"bob","device":"phone-2","id":"m-0001","kind":"read","ts":1735689605123}
/// ```
///
/// A "delivered" receipt may cover several messages the device ACKed together: `ids` then
/// lists all of them (`id` is the first, for readers that know only `id`).
///
/// ```json
/// {"by":"bob","device":"phone","id":"m-0001","ids":["m-0001","m-0002"],"kind":"delivered","ts":1735689605123}
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
    /// The original message's id (the first, if the receipt covers several).
    public var id: String
    /// Every message id the receipt covers, when more than one; `nil` for one (``id``).
    public var ids: [String]?
    /// The recipient of the original message, who received or read it.
    public var by: String
    /// The recipient's device that acknowledged or read it.
    public var device: String?
    /// When the gateway learned it, Unix milliseconds.
    public var ts: UInt64

    /// Creates a receipt payload for one message.
    public init(kind: Kind, id: String, by: String, device: String? = nil, ts: UInt64) {
        self.init(kind: kind, ids: [id], by: by, device: device, ts: ts)
    }

    /// Creates a receipt payload for one or more messages (`ids` must not be empty).
    public init(kind: Kind, ids: [String], by: String, device: String? = nil, ts: UInt64) {
        precondition(!ids.isEmpty, "a receipt covers at least one message")
        self.kind = kind
        self.id = ids[0]
        self.ids = ids.count > 1 ? ids : nil
        self.by = by
        self.device = device
        self.ts = ts
    }

    /// The fields exactly as read from JSON (``init(fastJSON:)``).
    init(decoded kind: Kind, id: String, ids: [String]?, by: String, device: String?, ts: UInt64) {
        self.kind = kind
        self.id = id
        self.ids = ids
        self.by = by
        self.device = device
        self.ts = ts
    }

    /// The message ids the receipt covers.
    public var messageIDs: [String] { ids ?? [id] }

    /// The RECEIPT_NOTICE for the sender's devices (one message); checks the ids.
    public func notice() throws(PayloadError) -> ReceiptNotice {
        guard let first = try notices().first else { throw .invalidField("ids", value: "[]") }
        return first
    }

    /// One RECEIPT_NOTICE per message the receipt covers; checks the ids.
    public func notices() throws(PayloadError) -> [ReceiptNotice] {
        guard IMIdentifier.isValid(self.by) else { throw .invalidField("by", value: self.by) }
        let all = messageIDs
        guard !all.isEmpty, all.count <= 1024 else { throw .invalidField("ids", value: "\(all.count) ids") }
        var result: [ReceiptNotice] = []
        result.reserveCapacity(all.count)
        for id in all {
            guard IMWire.messageIDLength.contains(id.utf8.count) else { throw .invalidField("id", value: id) }
            result.append(ReceiptNotice(from: self.by, messageID: id, kind: self.kind.wireKind, serverTime: self.ts))
        }
        return result
    }
}
