/// Which outbox entries are written first when several wait: chat before receipts before
/// presence before location before pub/sub.
public enum OutboxPriority: Int, Sendable, Hashable, Comparable, CaseIterable {
    /// Chat messages.
    case chat = 0
    /// Read receipts.
    case receipt
    /// Presence watches.
    case presence
    /// Location sharing: updates, watches.
    case location
    /// Generic publishes and subscriptions.
    case pubsub

    public static func < (lhs: Self, rhs: Self) -> Bool {
        lhs.rawValue < rhs.rawValue
    }
}

/// A message the client must get ACKed, as the ``Outbox`` (and an ``OutboxStore``) keeps it.
public struct OutboxEntry: Sendable, Hashable, Identifiable {
    /// A local number, increasing in enqueue order.
    public typealias ID = UInt64

    /// Local, increasing in enqueue order; kept across retransmits, reconnects and restores.
    public let id: ID
    /// The message, as enqueued: written with RESEND only through ``messageToWrite``.
    public var message: IMMessage
    /// Where it goes in the send order.
    public var priority: OutboxPriority
    /// `true`: kept across reconnects until ACKed (chat, receipts, QoS ≥ 1 publishes).
    /// `false`: dropped when the connection is lost (location updates, watches, QoS 0).
    public var durable: Bool
    /// A newer entry with the same key replaces this one while it is not in flight
    /// (location updates: only the latest position matters).
    public var coalescingKey: String?
    /// How many times it was written, on any connection.
    public var attempts: Int
    /// Whether it may have been written before: set when its ACK was overdue, when the
    /// connection it was written on was lost, and when it was restored from a store.
    public var resend: Bool

    /// Creates an entry (``Outbox/enqueue(_:priority:durable:coalescingKey:)`` does it for new
    /// messages; stores use this to rebuild what they saved).
    public init(
        id: ID,
        message: IMMessage,
        priority: OutboxPriority,
        durable: Bool,
        coalescingKey: String? = nil,
        attempts: Int = 0,
        resend: Bool = false
    ) {
        self.id = id
        self.message = message
        self.priority = priority
        self.durable = durable
        self.coalescingKey = coalescingKey
        self.attempts = attempts
        self.resend = resend
    }

    /// The message to put on the wire now: ``message`` with RESEND set if ``resend``
    /// (``IMMessage/markedResend()``).
    public var messageToWrite: IMMessage {
        resend ? message.markedResend() : message
    }
}
