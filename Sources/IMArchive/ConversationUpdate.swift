/// What one commit does to one line of a user's conversation list, gathered over the batch's
/// copies in offset order: one upsert per (user, conversation) however many copies it had.
struct ConversationUpdate: Sendable, Hashable {
    /// The user whose list it is.
    var user: String
    /// The conversation's key (``Conversation/key``).
    var key: String
    /// The newest copy's offset and time.
    var lastOffset: UInt64
    var lastTime: UInt64
    /// The newest copy the user sent (from a device: it has read the conversation up to it),
    /// or 0.
    var sentThrough: UInt64
    /// Copies from others after ``sentThrough`` (after every earlier one when 0).
    var received: Int

    /// The updates of a batch's new copies, in the order of the keys (``user``, ``key``): the
    /// order PostgreSQL locks the rows in, so that two commits cannot deadlock over them.
    static func gather(_ copies: [(copy: ArchiveMessage.Copy, offset: UInt64, serverTime: UInt64)]) -> [ConversationUpdate] {
        var updates: [String: [String: ConversationUpdate]] = [:]
        for (copy, offset, serverTime) in copies {
            guard let conversation = copy.conversation else { continue }
            let key = conversation.key
            var update = updates[copy.stream]?[key]
                ?? ConversationUpdate(user: copy.stream, key: key, lastOffset: 0, lastTime: 0, sentThrough: 0, received: 0)
            if offset > update.lastOffset {
                update.lastOffset = offset
                update.lastTime = serverTime
            }
            if copy.origin != nil {
                update.sentThrough = max(update.sentThrough, offset)
                update.received = 0
            } else {
                update.received += 1
            }
            updates[copy.stream, default: [:]][key] = update
        }
        return updates.keys.sorted().flatMap { user in updates[user]!.keys.sorted().map { updates[user]![$0]! } }
    }
}
