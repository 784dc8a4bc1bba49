/// One line of a user's conversation list: the conversation, its newest message, how far the
/// user has read, and how many messages from others came after that.
public struct ConversationSummary: Sendable, Hashable {
    /// The conversation.
    public var conversation: Conversation
    /// The offset of its newest message in the user's stream (the list is ordered by it).
    public var lastOffset: UInt64
    /// When its newest message was accepted, Unix milliseconds.
    public var lastTime: UInt64
    /// The newest message, when it is still stored (retention may have deleted it).
    public var last: StoredEntry?
    /// The user has read everything up to this offset (a read marker, or a message the user
    /// sent); 0 for nothing.
    public var readThrough: UInt64
    /// Messages from others after ``readThrough``.
    public var unread: Int

    /// A line.
    public init(conversation: Conversation, lastOffset: UInt64, lastTime: UInt64, last: StoredEntry?, readThrough: UInt64, unread: Int) {
        self.conversation = conversation
        self.lastOffset = lastOffset
        self.lastTime = lastTime
        self.last = last
        self.readThrough = readThrough
        self.unread = unread
    }
}

/// A page of a user's conversation list, newest first.
public struct ConversationPage: Sendable, Hashable {
    /// The conversations, the most recent first.
    public var conversations: [ConversationSummary]
    /// No older conversation is left.
    public var complete: Bool

    /// A page.
    public init(conversations: [ConversationSummary], complete: Bool) {
        self.conversations = conversations
        self.complete = complete
    }
}
