/// Where a user has read a conversation to, and what is left unread.
public struct ReadMarker: Sendable, Hashable {
    /// The conversation.
    public var conversation: Conversation
    /// Read up to this offset of the user's stream (a marker never moves back).
    public var readThrough: UInt64
    /// Messages from others after it.
    public var unread: Int

    /// A marker.
    public init(conversation: Conversation, readThrough: UInt64, unread: Int) {
        self.conversation = conversation
        self.readThrough = readThrough
        self.unread = unread
    }
}

/// What marking a conversation read came to.
public enum ReadMarkOutcome: Sendable, Hashable {
    /// Stored (or already there or beyond: a marker never moves back); the marker now.
    case marked(ReadMarker)
    /// The user has no message in that conversation.
    case unknownConversation
    /// The offset is past the conversation's newest message, which is at `last`.
    case pastEnd(last: UInt64)
}

/// A message deleted for everyone (``ArchiveStore/deleteMessage(sender:messageID:at:origin:tombstone:)``).
public struct DeletedMessage: Sendable, Hashable {
    /// The tombstone entries, one per stream that held a copy.
    public var tombstones: [StoredCopy]
    /// When it was deleted, Unix milliseconds.
    public var deletedAt: UInt64
    /// Deleted now (not by an earlier request).
    public var first: Bool
    /// The body it has now: the tombstone.
    public var body: [UInt8]

    /// A deletion.
    public init(tombstones: [StoredCopy], deletedAt: UInt64, first: Bool, body: [UInt8]) {
        self.tombstones = tombstones
        self.deletedAt = deletedAt
        self.first = first
        self.body = body
    }
}

/// What erasing a user removed (``ArchiveStore/eraseUser(_:at:tombstone:)``).
public struct UserErasure: Sendable, Hashable {
    /// Messages the user sent whose content became a tombstone now.
    public var messages: Int
    /// Entries of the user's own stream removed.
    public var entries: Int

    /// An erasure.
    public init(messages: Int, entries: Int) {
        self.messages = messages
        self.entries = entries
    }
}
