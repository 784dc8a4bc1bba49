/// An operation (tag 0x0105, u16) in DATA, CONTROL and READ_RECEIPT frames.
///
/// CONTROL frames always carry their operation item. The operations marked ``isImplied``
/// (chat, delivery and the two receipts) are named by their frame type and items instead, and
/// senders omit the item; so do the seed-shaped CONTROL frames, which receivers recognise by
/// their characteristic tag (see ``of(type:fields:)``).
public struct IMOperation: RawRepresentable, Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The code on the wire.
    public var rawValue: UInt16

    /// Wraps a code.
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// Wraps a code.
    public init(_ rawValue: UInt16) { self.rawValue = rawValue }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    /// Version and feature handshake, client to gateway. Implied by ``IMTag/versionRequest``.
    public static let hello = IMOperation(0x0001)
    /// Handshake reply. Implied by ``IMTag/versionResponse``.
    public static let helloOK = IMOperation(0x0002)
    /// Login with a token. Implied by ``IMTag/authToken``.
    public static let login = IMOperation(0x0010)
    /// Login accepted. Implied by ``IMTag/userID``.
    public static let loginOK = IMOperation(0x0011)
    /// End this device's session.
    public static let logout = IMOperation(0x0012)
    /// The gateway closes the connection, with a reason code.
    public static let kick = IMOperation(0x0013)
    /// An error report. Implied by ``IMTag/errorCode``.
    public static let error = IMOperation(0x0014)
    /// Replace the session's token before it expires, client to gateway. Only ever named by
    /// its operation item: without one, AUTH_TOKEN implies ``login``.
    public static let tokenRefresh = IMOperation(0x0015)
    /// Catch up from the archive now, client to gateway: every stored message after the
    /// device's position that it has not had. Answered by an ACK once they are written.
    public static let sync = IMOperation(0x0016)
    /// A page of a conversation's history, client to gateway. Answered by HISTORY_PAGE.
    public static let history = IMOperation(0x0017)
    /// A page of a conversation's history, gateway to client, answering HISTORY.
    public static let historyPage = IMOperation(0x0018)
    /// A page of the user's conversation list, client to gateway. Answered by CONVERSATION_LIST.
    public static let conversations = IMOperation(0x0019)
    /// A page of the user's conversation list, gateway to client, answering CONVERSATIONS.
    public static let conversationList = IMOperation(0x001A)
    /// A read marker: client to gateway, mark a conversation read up to an offset (ACKed
    /// with the marker and the unread count); gateway to client, another device of the user
    /// moved it.
    public static let readMarker = IMOperation(0x001B)
    /// Delete a message this user sent, for everyone, client to gateway (ACKed); every copy
    /// becomes a tombstone, delivered as a DELIVERY with DELETED.
    public static let delete = IMOperation(0x001C)
    /// Watch users' presence.
    public static let presenceWatch = IMOperation(0x0020)
    /// Stop watching users' presence.
    public static let presenceUnwatch = IMOperation(0x0021)
    /// A device's presence changed.
    public static let presence = IMOperation(0x0022)
    /// Start sharing the location with an audience.
    public static let locationShareStart = IMOperation(0x0030)
    /// Stop sharing the location.
    public static let locationShareStop = IMOperation(0x0031)
    /// A new position of this device.
    public static let locationUpdate = IMOperation(0x0032)
    /// Watch users' locations.
    public static let locationWatch = IMOperation(0x0033)
    /// Stop watching users' locations.
    public static let locationUnwatch = IMOperation(0x0034)
    /// A watched user's position.
    public static let location = IMOperation(0x0035)
    /// Subscribe to topic filters.
    public static let subscribe = IMOperation(0x0040)
    /// Unsubscribe from topic filters.
    public static let unsubscribe = IMOperation(0x0041)
    /// A generic publish, in either direction.
    public static let publish = IMOperation(0x0042)
    /// Typing state in a conversation, in either direction (CONTROL).
    public static let typing = IMOperation(0x0070)
    /// A chat message, client to gateway (implied: DATA with ``IMTag/to`` or ``IMTag/group``).
    public static let chat = IMOperation(0x0050)
    /// A chat message, gateway to client (implied: DATA with ``IMTag/from``).
    public static let delivery = IMOperation(0x0051)
    /// A read receipt, client to gateway (implied: READ_RECEIPT with ``IMTag/to``).
    public static let receipt = IMOperation(0x0060)
    /// A delivery or read receipt, gateway to client (implied: READ_RECEIPT with ``IMTag/from``).
    public static let receiptNotice = IMOperation(0x0061)

    /// Every operation of this version, in ascending order.
    public static let allKnown: [IMOperation] = catalog.keys.sorted().map(IMOperation.init(rawValue:))

    /// The upper-snake-case name, or `nil` for an unknown operation.
    public var name: String? { Self.catalog[self.rawValue]?.name }

    /// The frame type the operation travels in, or `nil` for an unknown operation.
    public var frameType: IMFrameType? { Self.catalog[self.rawValue]?.type }

    /// Whether senders omit the operation item because frame type and items imply it.
    public var isImplied: Bool { [.chat, .delivery, .receipt, .receiptNotice].contains(self) }

    /// `NAME (0xNNNN)`.
    public var description: String { "\(self.name ?? "UNKNOWN") (0x\(hex(self.rawValue, 4)))" }

    private static let catalog: [UInt16: (name: String, type: IMFrameType)] = [
        0x0001: ("HELLO", .control), 0x0002: ("HELLO_OK", .control),
        0x0010: ("LOGIN", .control), 0x0011: ("LOGIN_OK", .control), 0x0012: ("LOGOUT", .control),
        0x0013: ("KICK", .control), 0x0014: ("ERROR", .control), 0x0015: ("TOKEN_REFRESH", .control),
        0x0016: ("SYNC", .control), 0x0017: ("HISTORY", .control), 0x0018: ("HISTORY_PAGE", .control),
        0x0019: ("CONVERSATIONS", .control), 0x001A: ("CONVERSATION_LIST", .control), 0x001B: ("READ_MARKER", .control),
        0x001C: ("DELETE", .control),
        0x0020: ("PRESENCE_WATCH", .control), 0x0021: ("PRESENCE_UNWATCH", .control),
        0x0022: ("PRESENCE", .control),
        0x0030: ("LOCATION_SHARE_START", .control), 0x0031: ("LOCATION_SHARE_STOP", .control),
        0x0032: ("LOCATION_UPDATE", .control), 0x0033: ("LOCATION_WATCH", .control),
        0x0034: ("LOCATION_UNWATCH", .control), 0x0035: ("LOCATION", .control),
        0x0040: ("SUBSCRIBE", .control), 0x0041: ("UNSUBSCRIBE", .control), 0x0042: ("PUBLISH", .data),
        0x0050: ("CHAT", .data), 0x0051: ("DELIVERY", .data),
        0x0060: ("RECEIPT", .readReceipt), 0x0061: ("RECEIPT_NOTICE", .readReceipt),
        0x0070: ("TYPING", .control),
    ]
}

extension IMOperation {
    /// The operation of a frame: its operation item, or the one its type and items imply.
    ///
    /// Implied: DATA with TO → CHAT, with FROM → DELIVERY, with GROUP and neither → CHAT (a
    /// carbon DELIVERY, which has FROM and TO, carries its operation item); READ_RECEIPT with TO → RECEIPT,
    /// with FROM → RECEIPT_NOTICE (TO wins when both are present). A CONTROL frame is named by
    /// the first of VERSION_REQUEST → HELLO, VERSION_RESPONSE → HELLO_OK, AUTH_TOKEN → LOGIN,
    /// USER_ID → LOGIN_OK, ERROR_CODE → ERROR **in the order the items appear in the frame**:
    /// CONTROL{ERROR_CODE, USER_ID} is an ERROR, CONTROL{USER_ID, ERROR_CODE} a LOGIN_OK.
    /// - Returns: `nil` for HEARTBEAT and ACK, which have no operation.
    /// - Throws: ``IMWireError/unknownOperation(type:operation:)`` for an operation unknown for the type.
    public static func of(type: IMFrameType, fields: TLVFields) throws(IMWireError) -> IMOperation? {
        switch type {
        case .heartbeat, .ack:
            return nil
        case .data, .control, .readReceipt:
            if let item = fields[.operation] {
                let operation = IMOperation(try item.integer(as: UInt16.self))
                guard operation.frameType == type else {
                    throw .unknownOperation(type: type, operation: operation.rawValue)
                }
                return operation
            }
            switch type {
            case .data:
                if fields[.to] != nil { return .chat }
                if fields[.from] != nil { return .delivery }
                if fields[.group] != nil { return .chat }
            case .readReceipt:
                if fields[.to] != nil { return .receipt }
                if fields[.from] != nil { return .receiptNotice }
            default:
                // Item order, not the order of this list (PROTOCOL.md section 4).
                for item in fields.items {
                    if let operation = Self.impliedByControlItem[item.tag] { return operation }
                }
            }
            throw .unknownOperation(type: type, operation: nil)
        }
    }

    /// The items that name a seed-shaped CONTROL frame's operation (the frame has no OP item).
    private static let impliedByControlItem: [IMTag: IMOperation] = [
        .versionRequest: .hello, .versionResponse: .helloOK, .authToken: .login, .userID: .loginOK, .errorCode: .error,
    ]
}
