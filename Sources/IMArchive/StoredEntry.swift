/// One entry of a user's stream, as read back: a message at an offset.
public struct StoredEntry: Sendable, Hashable {
    /// The user whose stream it is.
    public var stream: String
    /// Its offset in the stream: 1, 2, 3, ... in commit order.
    public var offset: UInt64
    /// For the sender's own copy: the device that sent it; `nil` for a message received.
    public var origin: String?
    /// The sender's user id.
    public var sender: String
    /// The sender's message id.
    public var messageID: String
    /// When the gateway accepted it, Unix milliseconds.
    public var serverTime: UInt64
    /// The stored body.
    public var body: [UInt8]
    /// The conversation it is part of, when the store knows it (history reads say it).
    public var conversation: Conversation?

    /// An entry.
    public init(
        stream: String, offset: UInt64, origin: String?, sender: String, messageID: String, serverTime: UInt64, body: [UInt8],
        conversation: Conversation? = nil
    ) {
        self.stream = stream
        self.offset = offset
        self.origin = origin
        self.sender = sender
        self.messageID = messageID
        self.serverTime = serverTime
        self.body = body
        self.conversation = conversation
    }
}

/// What a stream holds: the offsets given out so far, and the oldest still stored (older ones
/// were deleted by retention).
public struct StreamBounds: Sendable, Hashable {
    /// The last offset given out; 0 for a stream nothing was ever stored in.
    public var last: UInt64
    /// The first offset still stored; `last + 1` when none is.
    public var first: UInt64
    /// The newest offset a cap on messages per conversation deleted (0: none): the stream
    /// has holes up to it, so a device whose position is older may have lost messages.
    public var trimmedThrough: UInt64

    /// Bounds.
    public init(last: UInt64, first: UInt64, trimmedThrough: UInt64 = 0) {
        self.last = last
        self.first = first
        self.trimmedThrough = trimmedThrough
    }

    /// Whether messages after `position` were deleted (retention, or a cap per
    /// conversation): a device there gets what is left.
    public func hasLost(after position: UInt64) -> Bool {
        position + 1 < first || position < trimmedThrough
    }

    /// A stream nothing was stored in.
    public static let empty = StreamBounds(last: 0, first: 1)
}

/// How far a device has come in its user's stream: it has (or was given and ACKed, or does
/// not need) every entry up to `offset`.
public struct DevicePosition: Sendable, Hashable {
    /// The user.
    public var user: String
    /// The device.
    public var device: String
    /// Everything up to this offset is done.
    public var offset: UInt64

    /// A position.
    public init(user: String, device: String, offset: UInt64) {
        self.user = user
        self.device = device
        self.offset = offset
    }
}
