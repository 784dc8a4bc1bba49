import IMWire

extension IMClient {
    /// A page of a conversation's history (``IMClient/history(of:position:limit:)``).
    public struct HistoryPage: Sendable, Hashable {
        /// The conversation.
        public var conversation: IMConversation
        /// Its messages, oldest first, each with its ``Message/streamOffset``; what this user
        /// sent is a carbon (``Message/isCarbon``, with ``Message/to`` or ``Message/group``).
        public var messages: [Message]
        /// Nothing is left in the page's direction.
        public var complete: Bool
        /// The archive's epoch: the offsets are of it.
        public var epoch: UInt64
    }

    /// One line of the conversation list.
    public struct ConversationLine: Sendable, Hashable {
        /// The conversation.
        public var conversation: IMConversation
        /// Its newest message's offset in this user's stream.
        public var lastOffset: UInt64
        /// When its newest message was accepted, Unix milliseconds.
        public var lastTime: UInt64
        /// Its newest message, when still stored.
        public var last: Message?
        /// Read up to this offset (0: nothing).
        public var readThrough: UInt64
        /// Messages from others after the marker.
        public var unread: Int
    }

    /// A page of the conversation list, the most recent first.
    public struct ConversationsPage: Sendable, Hashable {
        /// The conversations.
        public var lines: [ConversationLine]
        /// No older conversation is left; otherwise the next page is
        /// `conversations(before: lines.last!.lastOffset)`.
        public var complete: Bool
    }

    /// Where a conversation is read to, and what is left (the answer of
    /// ``IMClient/markRead(_:through:)`` and ``Event/readMarker(_:)``).
    public struct ReadMarker: Sendable, Hashable {
        /// The conversation.
        public var conversation: IMConversation
        /// Read up to this offset of this user's stream.
        public var readThrough: UInt64
        /// Messages from others after it.
        public var unread: UInt32

        /// A marker.
        public init(conversation: IMConversation, readThrough: UInt64, unread: UInt32) {
            self.conversation = conversation
            self.readThrough = readThrough
            self.unread = unread
        }
    }

    /// A page of `conversation`'s history from the gateway's archive (PROTOCOL.md 6.15):
    /// the newest messages, those older than an offset (`.before`), or those newer
    /// (`.after`); at most `limit` (the gateway's default 50 when `nil`, at most 200).
    ///
    /// - Throws: ``IMClientError/refused(_:_:)`` with FORBIDDEN (a group this user is not
    ///   in), BAD_REQUEST, STORE_UNAVAILABLE (try later) or UNKNOWN_OPERATION (the gateway
    ///   keeps no archive); ``IMClientError/disconnected``, ``IMClientError/timeout``.
    public func history(of conversation: IMConversation, position: HistoryQuery.Position = .latest, limit: UInt16? = nil) async throws(IMClientError) -> HistoryPage {
        let ack = try await request(
            .history(HistoryQuery(conversation: conversation, position: position, limit: limit)), priority: .pubsub, durable: false,
            timeout: configuration.ackTimeout)
        guard case .historyPage(let page)? = answers.removeValue(forKey: ack.sequence) else {
            throw .refused(.badRequest, "the gateway answered HISTORY without a HISTORY_PAGE")
        }
        return HistoryPage(conversation: page.conversation, messages: page.messages.map(Self.message), complete: page.complete, epoch: page.epoch)
    }

    /// The whole history of `conversation`, newest page first, each page oldest first: pages
    /// of `pageSize` are fetched as the sequence is iterated, until the oldest stored message.
    public nonisolated func historyPages(of conversation: IMConversation, pageSize: UInt16 = 50) -> AsyncThrowingStream<HistoryPage, any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                var position = HistoryQuery.Position.latest
                do {
                    while !Task.isCancelled {
                        let page = try await self.history(of: conversation, position: position, limit: pageSize)
                        continuation.yield(page)
                        guard !page.complete, let oldest = page.messages.first?.streamOffset else { break }
                        position = .before(oldest)
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// A page of this user's conversations, the most recent first, each with its newest
    /// message and unread count (PROTOCOL.md 6.16): from the newest, or older than `before`.
    public func conversations(before: UInt64? = nil, limit: UInt16? = nil) async throws(IMClientError) -> ConversationsPage {
        let ack = try await request(
            .conversations(ConversationsQuery(before: before, limit: limit)), priority: .pubsub, durable: false, timeout: configuration.ackTimeout)
        guard case .conversationList(let list)? = answers.removeValue(forKey: ack.sequence) else {
            throw .refused(.badRequest, "the gateway answered CONVERSATIONS without a CONVERSATION_LIST")
        }
        let lines = list.lines.map { line in
            ConversationLine(
                conversation: line.conversation, lastOffset: line.lastOffset, lastTime: line.lastTime, last: line.last.map(Self.message),
                readThrough: line.readThrough, unread: Int(line.unread))
        }
        return ConversationsPage(lines: lines, complete: list.complete)
    }

    /// Marks `conversation` read up to `offset` of this user's stream (a message's
    /// ``Message/streamOffset``, usually the newest shown): the unread counts follow, and
    /// this user's other online devices get ``Event/readMarker(_:)`` (PROTOCOL.md 6.17). A
    /// marker never moves back: the answer is where it is now.
    /// - Throws: ``IMClientError/refused(_:_:)`` with BAD_REQUEST (past the conversation's
    ///   newest message, or no message in it), FORBIDDEN, STORE_UNAVAILABLE, UNKNOWN_OPERATION.
    public func markRead(_ conversation: IMConversation, through offset: UInt64) async throws(IMClientError) -> ReadMarker {
        let ack = try await request(
            .readMarker(ReadMarkerUpdate(conversation: conversation, readThrough: offset)), priority: .receipt, durable: false,
            timeout: configuration.ackTimeout)
        return ReadMarker(conversation: conversation, readThrough: ack.readThrough ?? offset, unread: ack.unread ?? 0)
    }

    /// Deletes a message this user sent, for everyone (PROTOCOL.md 6.18): every copy in the
    /// archive becomes a tombstone, and every device of its recipients (and this user's other
    /// devices) gets ``Event/deleted(_:)``, online or at its next login. Returns when it was
    /// deleted (Unix milliseconds); deleting again returns the same.
    /// - Throws: ``IMClientError/refused(_:_:)`` with BAD_REQUEST (no such message of this
    ///   user is stored), STORE_UNAVAILABLE, UNKNOWN_OPERATION (no archive).
    @discardableResult
    public func delete(messageID: String) async throws(IMClientError) -> UInt64 {
        let ack = try await request(.delete(MessageDelete(messageID: messageID)), priority: .receipt, durable: false, timeout: configuration.ackTimeout)
        return ack.serverTime ?? 0
    }

    /// A stored message as the application sees it.
    static func message(_ delivery: ChatDelivery) -> Message {
        var message = Message(delivery)
        message.isArchived = true
        return message
    }
}
