/// Every message of the protocol, decoded from or encoded into a frame.
///
/// ```swift
/// switch try IMMessage(frame: frame) {
/// case .heartbeat: channel.write(frame.ack(timestamp: now))
/// case .login(let login): ...
/// case .chat(let chat): ...
/// default: ...
/// }
/// ```
public enum IMMessage: Hashable, Sendable {
    /// HEARTBEAT (type 1, empty body).
    case heartbeat
    /// ACK (type 2).
    case ack(Ack)
    /// HELLO (CONTROL).
    case hello(Hello)
    /// HELLO_OK (CONTROL).
    case helloOK(HelloOK)
    /// LOGIN (CONTROL).
    case login(LoginRequest)
    /// LOGIN_OK (CONTROL).
    case loginOK(LoginOK)
    /// LOGOUT (CONTROL).
    case logout(Logout)
    /// KICK (CONTROL).
    case kick(Kick)
    /// ERROR (CONTROL).
    case error(ErrorNotice)
    /// TOKEN_REFRESH (CONTROL), client to gateway.
    case tokenRefresh(TokenRefresh)
    /// SYNC (CONTROL), client to gateway.
    case sync(Sync)
    /// HISTORY (CONTROL), client to gateway.
    case history(HistoryQuery)
    /// HISTORY_PAGE (CONTROL), gateway to client.
    case historyPage(HistoryAnswer)
    /// CONVERSATIONS (CONTROL), client to gateway.
    case conversations(ConversationsQuery)
    /// CONVERSATION_LIST (CONTROL), gateway to client.
    case conversationList(ConversationsAnswer)
    /// READ_MARKER (CONTROL), either direction.
    case readMarker(ReadMarkerUpdate)
    /// DELETE (CONTROL), client to gateway.
    case delete(MessageDelete)
    /// CHAT (DATA), client to gateway.
    case chat(ChatSend)
    /// DELIVERY (DATA), gateway to client.
    case delivery(ChatDelivery)
    /// RECEIPT (READ_RECEIPT), client to gateway.
    case readReceipt(ReadReceipt)
    /// RECEIPT_NOTICE (READ_RECEIPT), gateway to client.
    case receiptNotice(ReceiptNotice)
    /// PRESENCE_WATCH (CONTROL).
    case presenceWatch(PresenceWatch)
    /// PRESENCE_UNWATCH (CONTROL).
    case presenceUnwatch(PresenceUnwatch)
    /// PRESENCE (CONTROL).
    case presence(PresenceNotice)
    /// LOCATION_SHARE_START (CONTROL).
    case locationShareStart(LocationShareStart)
    /// LOCATION_SHARE_STOP (CONTROL).
    case locationShareStop(LocationShareStop)
    /// LOCATION_UPDATE (CONTROL).
    case locationUpdate(LocationUpdate)
    /// LOCATION_WATCH (CONTROL).
    case locationWatch(LocationWatch)
    /// LOCATION_UNWATCH (CONTROL).
    case locationUnwatch(LocationUnwatch)
    /// LOCATION (CONTROL).
    case location(LocationNotice)
    /// SUBSCRIBE (CONTROL).
    case subscribe(Subscribe)
    /// UNSUBSCRIBE (CONTROL).
    case unsubscribe(Unsubscribe)
    /// PUBLISH (DATA).
    case publish(Publish)
    /// TYPING (CONTROL).
    case typing(Typing)

    /// The operation of the message in `frame` (explicit or implied), whether or not the
    /// message itself is valid; `nil` for a frame without one (HEARTBEAT, ACK) or whose
    /// body or operation cannot be read. Tells a receiver what a refused frame was: a LOGIN
    /// that cannot be decoded is a refused LOGIN.
    public static func operation(of frame: IMFrame) -> IMOperation? {
        switch frame.header.type {
        case .heartbeat, .ack: return nil
        case .data, .control, .readReceipt: break
        }
        guard let fields = try? frame.fields() else { return nil }
        return (try? IMOperation.of(type: frame.header.type, fields: fields)) ?? nil
    }

    /// Decodes the message in `frame`, dispatching on frame type and operation.
    /// - Throws: ``IMWireError`` (message errors: answer with a negative ACK or ERROR).
    public init(frame: IMFrame) throws(IMWireError) {
        switch frame.header.type {
        case .heartbeat:
            self = .heartbeat
            return
        case .ack:
            self = .ack(try Ack(frame: frame))
            return
        case .data, .control, .readReceipt:
            break
        }
        let fields = try frame.fields()
        guard let operation = try IMOperation.of(type: frame.header.type, fields: fields) else {
            throw .unknownOperation(type: frame.header.type, operation: nil)
        }
        switch operation {
        case .hello: self = .hello(try Hello(fields: fields))
        case .helloOK: self = .helloOK(try HelloOK(fields: fields))
        case .login: self = .login(try LoginRequest(fields: fields))
        case .loginOK: self = .loginOK(try LoginOK(fields: fields))
        case .logout: self = .logout(try Logout(fields: fields))
        case .kick: self = .kick(try Kick(fields: fields))
        case .error: self = .error(try ErrorNotice(fields: fields))
        case .tokenRefresh: self = .tokenRefresh(try TokenRefresh(fields: fields))
        case .sync: self = .sync(try Sync(fields: fields))
        case .history: self = .history(try HistoryQuery(fields: fields))
        case .historyPage: self = .historyPage(try HistoryAnswer(fields: fields))
        case .conversations: self = .conversations(try ConversationsQuery(fields: fields))
        case .conversationList: self = .conversationList(try ConversationsAnswer(fields: fields))
        case .readMarker: self = .readMarker(try ReadMarkerUpdate(fields: fields))
        case .delete: self = .delete(try MessageDelete(fields: fields))
        case .chat: self = .chat(try ChatSend(fields: fields))
        case .delivery: self = .delivery(try ChatDelivery(fields: fields))
        case .receipt: self = .readReceipt(try ReadReceipt(fields: fields))
        case .receiptNotice: self = .receiptNotice(try ReceiptNotice(fields: fields))
        case .presenceWatch: self = .presenceWatch(try PresenceWatch(fields: fields))
        case .presenceUnwatch: self = .presenceUnwatch(try PresenceUnwatch(fields: fields))
        case .presence: self = .presence(try PresenceNotice(fields: fields))
        case .locationShareStart: self = .locationShareStart(try LocationShareStart(fields: fields))
        case .locationShareStop: self = .locationShareStop(try LocationShareStop(fields: fields))
        case .locationUpdate: self = .locationUpdate(try LocationUpdate(fields: fields))
        case .locationWatch: self = .locationWatch(try LocationWatch(fields: fields))
        case .locationUnwatch: self = .locationUnwatch(try LocationUnwatch(fields: fields))
        case .location: self = .location(try LocationNotice(fields: fields))
        case .subscribe: self = .subscribe(try Subscribe(fields: fields))
        case .unsubscribe: self = .unsubscribe(try Unsubscribe(fields: fields))
        case .publish: self = .publish(try Publish(fields: fields))
        case .typing: self = .typing(try Typing(fields: fields))
        default: throw .unknownOperation(type: frame.header.type, operation: operation.rawValue)
        }
    }

    /// The body message, or `nil` for HEARTBEAT and ACK.
    public var body: (any IMMessageBody)? {
        switch self {
        case .heartbeat, .ack: nil
        case .hello(let m): m
        case .helloOK(let m): m
        case .login(let m): m
        case .loginOK(let m): m
        case .logout(let m): m
        case .kick(let m): m
        case .error(let m): m
        case .tokenRefresh(let m): m
        case .sync(let m): m
        case .history(let m): m
        case .historyPage(let m): m
        case .conversations(let m): m
        case .conversationList(let m): m
        case .readMarker(let m): m
        case .delete(let m): m
        case .chat(let m): m
        case .delivery(let m): m
        case .readReceipt(let m): m
        case .receiptNotice(let m): m
        case .presenceWatch(let m): m
        case .presenceUnwatch(let m): m
        case .presence(let m): m
        case .locationShareStart(let m): m
        case .locationShareStop(let m): m
        case .locationUpdate(let m): m
        case .locationWatch(let m): m
        case .locationUnwatch(let m): m
        case .location(let m): m
        case .subscribe(let m): m
        case .unsubscribe(let m): m
        case .publish(let m): m
        case .typing(let m): m
        }
    }

    /// The frame type the message travels in.
    public var frameType: IMFrameType {
        switch self {
        case .heartbeat: .heartbeat
        case .ack: .ack
        default: type(of: self.body!).frameType
        }
    }

    /// The operation, or `nil` for HEARTBEAT and ACK.
    public var operation: IMOperation? {
        self.body.map { type(of: $0).operation }
    }

    /// A frame carrying the message. For `.ack` the header sequence is the ACK's
    /// ``Ack/sequence`` and `sequence` is ignored.
    public func frame(
        sequence: UInt32,
        timestamp: UInt32,
        sessionID: UInt16,
        compressType: IMCompressType = .none
    ) -> IMFrame {
        switch self {
        case .heartbeat:
            IMFrame(type: .heartbeat, sequence: sequence, timestamp: timestamp, sessionID: sessionID)
        case .ack(let ack):
            ack.frame(timestamp: timestamp, sessionID: sessionID)
        default:
            self.body!.frame(sequence: sequence, timestamp: timestamp, sessionID: sessionID, compressType: compressType)
        }
    }
}
