/// HISTORY_PAGE (CONTROL, op 0x0018), gateway to client: the answer to a ``HistoryQuery``.
///
/// REF_SEQUENCE (the query's sequence), STREAM_EPOCH, TO or GROUP (the conversation),
/// COMPLETE (1: nothing is left in the page's direction), and a CONTAINER of records, one per
/// message, oldest first: each a CONTAINER holding the items of a DELIVERY (FROM, TO or GROUP,
/// CARBON for what the user sent, MESSAGE_ID, SERVER_TIME, STREAM_OFFSET, the content). A page
/// is cut short (COMPLETE 0) when more would not fit the device's body limit.
public struct HistoryAnswer: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .historyPage }

    /// The query's sequence.
    public var refSequence: UInt32
    /// The archive's epoch: the offsets are of it.
    public var epoch: UInt64
    /// The conversation.
    public var conversation: IMConversation
    /// Nothing is left in the page's direction.
    public var complete: Bool
    /// The messages, oldest first.
    public var messages: [ChatDelivery]

    /// Creates a page.
    public init(refSequence: UInt32, epoch: UInt64, conversation: IMConversation, complete: Bool, messages: [ChatDelivery]) {
        self.refSequence = refSequence
        self.epoch = epoch
        self.conversation = conversation
        self.complete = complete
        self.messages = messages
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.refSequence = try fields.integer(.refSequence)
        self.epoch = try fields.integer(.streamEpoch)
        self.conversation = try IMConversation(fields: fields)
        self.complete = try fields.flag(.complete)
        var messages: [ChatDelivery] = []
        if let list = try fields.optional(.container) {
            for record in try list.items().all(.container) { messages.append(try ChatDelivery(fields: record.items())) }
        }
        self.messages = messages
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.refSequence, integer: refSequence)
        writer.write(.streamEpoch, integer: epoch)
        conversation.write(to: &writer)
        if complete { writer.write(.complete, flag: true) }
        if !messages.isEmpty {
            writer.writeContainer { list in
                for message in messages { list.writeContainer { message.write(to: &$0) } }
            }
        }
    }
}
