/// A chat message to store: its body once, and one entry in the stream of each user it goes
/// to (the recipient, every member of a group, and the sender's own stream, from which the
/// sender's other devices get it as a carbon).
public struct ArchiveMessage: Sendable, Hashable {
    /// One stream the message is appended to.
    public struct Copy: Sendable, Hashable {
        /// The user whose stream it is.
        public var stream: String
        /// For the sender's own copy: the device that sent it (which has it already and is
        /// not sent it again); `nil` for a message received.
        public var origin: String?
        /// The conversation it is part of, as the stream's user sees it (the other user of a
        /// one-to-one message, or the group); `nil`: in no conversation's history.
        public var conversation: Conversation?

        /// A copy for `stream`.
        public init(stream: String, origin: String? = nil, conversation: Conversation? = nil) {
            self.stream = stream
            self.origin = origin
            self.conversation = conversation
        }
    }

    /// The sender's user id.
    public var sender: String
    /// The sender's message id: with `sender`, the message's key. Storing it again is a
    /// resend (same `fingerprint`) or a reused id (another one).
    public var messageID: String
    /// What makes the message this message (recipient and content), to tell a resend from
    /// an id reused for another message.
    public var fingerprint: UInt64
    /// When the gateway accepted it, Unix milliseconds.
    public var serverTime: UInt64
    /// The stored body, opaque to the archive.
    public var body: [UInt8]
    /// The streams it goes to, at least one, each once.
    public var copies: [Copy]

    /// A message to store.
    public init(sender: String, messageID: String, fingerprint: UInt64, serverTime: UInt64, body: [UInt8], copies: [Copy]) {
        self.sender = sender
        self.messageID = messageID
        self.fingerprint = fingerprint
        self.serverTime = serverTime
        self.body = body
        self.copies = copies
    }
}

/// Where one copy of a stored message is.
public struct StoredCopy: Sendable, Hashable {
    /// The user whose stream it is in.
    public var stream: String
    /// Its offset there.
    public var offset: UInt64
    /// For the sender's own copy: the device that sent it.
    public var origin: String?

    /// A copy's place.
    public init(stream: String, offset: UInt64, origin: String? = nil) {
        self.stream = stream
        self.offset = offset
        self.origin = origin
    }
}

/// What storing a message came to.
public enum AppendOutcome: Sendable, Hashable {
    /// Stored now: the offset of each copy, in the order of ``ArchiveMessage/copies``.
    case stored([UInt64])
    /// Stored before (same sender, id and fingerprint): the copies as they were stored then,
    /// and its server time then. Nothing was added.
    case duplicate([StoredCopy], serverTime: UInt64)
    /// The sender used this id for another message (another fingerprint): nothing was added.
    case reused

    /// The offset of the copy in `stream`, if the message is (now or before) stored there.
    public func offset(in stream: String, of message: ArchiveMessage) -> UInt64? {
        switch self {
        case .stored(let offsets):
            return zip(message.copies, offsets).first { $0.0.stream == stream }?.1
        case .duplicate(let copies, _):
            return copies.first { $0.stream == stream }?.offset
        case .reused:
            return nil
        }
    }
}
