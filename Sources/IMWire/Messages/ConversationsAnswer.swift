/// CONVERSATION_LIST (CONTROL, op 0x001A), gateway to client: the answer to a
/// ``ConversationsQuery``.
///
/// REF_SEQUENCE, STREAM_EPOCH, COMPLETE (1: no older conversation is left), and a CONTAINER of
/// records, the most recent first: each `CONTAINER{TO or GROUP, STREAM_OFFSET (its newest
/// message's), SERVER_TIME (when that was accepted), READ_THROUGH, UNREAD, CONTAINER{the
/// newest message's DELIVERY items}}` (the last when the message is still stored).
public struct ConversationsAnswer: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .conversationList }

    /// One conversation.
    public struct Line: Hashable, Sendable {
        /// The conversation.
        public var conversation: IMConversation
        /// Its newest message's offset in the user's stream.
        public var lastOffset: UInt64
        /// When its newest message was accepted, Unix milliseconds.
        public var lastTime: UInt64
        /// The read marker (0: nothing read).
        public var readThrough: UInt64
        /// Messages from others after the marker.
        public var unread: UInt32
        /// The newest message, when it is still stored.
        public var last: ChatDelivery?

        /// A line.
        public init(conversation: IMConversation, lastOffset: UInt64, lastTime: UInt64, readThrough: UInt64, unread: UInt32, last: ChatDelivery?) {
            self.conversation = conversation
            self.lastOffset = lastOffset
            self.lastTime = lastTime
            self.readThrough = readThrough
            self.unread = unread
            self.last = last
        }

        init(fields: TLVFields) throws(IMWireError) {
            self.conversation = try IMConversation(fields: fields)
            self.lastOffset = try fields.integer(.streamOffset)
            self.lastTime = try fields.integer(.serverTime)
            self.readThrough = try fields.optionalInteger(.readThrough) ?? 0
            self.unread = try fields.optionalInteger(.unread) ?? 0
            self.last = try fields.optional(.container).map { item throws(IMWireError) in try ChatDelivery(fields: item.items()) }
        }

        func write(to writer: inout TLVWriter) {
            writer.writeContainer { record in
                conversation.write(to: &record)
                record.write(.streamOffset, integer: lastOffset)
                record.write(.serverTime, integer: lastTime)
                record.write(.readThrough, integer: readThrough)
                record.write(.unread, integer: unread)
                if let last { record.writeContainer { last.write(to: &$0) } }
            }
        }
    }

    /// The query's sequence.
    public var refSequence: UInt32
    /// The archive's epoch.
    public var epoch: UInt64
    /// No older conversation is left.
    public var complete: Bool
    /// The conversations, the most recent first.
    public var lines: [Line]

    /// Creates a page.
    public init(refSequence: UInt32, epoch: UInt64, complete: Bool, lines: [Line]) {
        self.refSequence = refSequence
        self.epoch = epoch
        self.complete = complete
        self.lines = lines
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.refSequence = try fields.integer(.refSequence)
        self.epoch = try fields.integer(.streamEpoch)
        self.complete = try fields.flag(.complete)
        var lines: [Line] = []
        if let list = try fields.optional(.container) {
            for record in try list.items().all(.container) { lines.append(try Line(fields: record.items())) }
        }
        self.lines = lines
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.refSequence, integer: refSequence)
        writer.write(.streamEpoch, integer: epoch)
        if complete { writer.write(.complete, flag: true) }
        if !lines.isEmpty {
            writer.writeContainer { list in
                for line in lines { line.write(to: &list) }
            }
        }
    }
}
