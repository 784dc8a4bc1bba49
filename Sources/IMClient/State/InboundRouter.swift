import IMWire

/// What the client does with each frame from the gateway: decides, does no I/O.
///
/// Before LOGIN_OK only heartbeats, LOGIN_OK and ERROR matter (PROTOCOL.md 6.1); after it,
/// ACKs settle requests, deliveries and receipt notices are surfaced and ACKed (deliveries
/// once per sender and message id), presence and kicks are surfaced.
struct InboundRouter: Sendable {
    /// One thing to do, in the order returned.
    enum Action: Hashable, Sendable {
        /// Answer the login: it succeeded.
        case loggedIn(LoginOK)
        /// Answer the login: refused (the gateway closes the connection).
        case loginRefused(IMErrorCode, String?)
        /// Settle the pending request whose sequence the ACK names.
        case settle(Ack)
        /// Surface an event to the application.
        case emit(IMClient.Event)
        /// Write this frame (an ACK or a negative ACK) to the gateway.
        case reply(IMFrame)
        /// Keep this answer (HISTORY_PAGE, CONVERSATION_LIST) for the request whose sequence
        /// it names, and settle that request.
        case answer(UInt32, IMMessage)
    }

    private(set) var isLoggedIn = false
    private(set) var dedup: DeliveryDedup
    /// Publications seen, by topic and payload, to drop a redelivery flagged RESEND.
    private(set) var publications: DeliveryDedup
    /// Where the device is in its stream of stored messages (a gateway with an archive).
    var cursor: StreamCursor
    /// Deliveries from the archive surfaced since the last SYNC was written.
    var replayed = 0

    /// A router remembering `dedupWindow` deliveries (and as many publications), the device
    /// at `position` in its stream.
    init(dedupWindow: Int = 4096, position: StreamPosition? = nil) {
        self.dedup = DeliveryDedup(capacity: dedupWindow)
        self.publications = DeliveryDedup(capacity: dedupWindow)
        self.cursor = StreamCursor(position: position)
    }

    /// A new connection: LOGIN_OK is awaited again. What was seen is remembered, so a
    /// message redelivered after the reconnect is not surfaced twice.
    mutating func connectionStarted() {
        isLoggedIn = false
    }

    /// The actions for `frame`; `timestamp` (Unix seconds) goes into replies.
    mutating func react(to frame: IMFrame, timestamp: UInt32) -> [Action] {
        let message: IMMessage
        do {
            message = try IMMessage(frame: frame)
        } catch {
            // A well-framed message we cannot read: refuse it if it expects an ACK (the
            // gateway then stops redelivering it); CONTROL frames are not answered.
            guard frame.header.type == .data || frame.header.type == .readReceipt else { return [] }
            return [.reply(Ack.refusing(sequence: frame.header.sequence, code: error.errorCode, message: "\(error)")
                .frame(timestamp: timestamp, sessionID: frame.header.sessionID))]
        }
        if case .heartbeat = message {
            return [.reply(frame.ack(timestamp: timestamp))]
        }
        guard isLoggedIn else { return reactBeforeLogin(to: message) }
        switch message {
        case .ack(let ack):
            return [.settle(ack)]
        case .delivery(let delivery):
            let ack = Action.reply(frame.ack(timestamp: timestamp))
            // Once per offset (live and from the archive), and once per sender and id.
            if let offset = delivery.streamOffset, !cursor.received(offset) { return [ack] }
            if delivery.deleted {
                // A tombstone: once, apart from the message it deletes.
                guard dedup.firstSighting(sender: delivery.from, messageID: delivery.messageID + "\u{0}deleted") else { return [ack] }
                let deletion = IMClient.Deletion(
                    from: delivery.from, messageID: delivery.messageID, group: delivery.group, to: delivery.to, isCarbon: delivery.carbon,
                    deletedAt: delivery.serverTime, streamOffset: delivery.streamOffset)
                return [.emit(.deleted(deletion)), ack]
            }
            guard dedup.firstSighting(sender: delivery.from, messageID: delivery.messageID) else { return [ack] }
            if delivery.archived { replayed += 1 }
            let surfaced = IMClient.Message(delivery)
            return [.emit(.message(surfaced)), ack]
        case .receiptNotice(let notice):
            let receipt = IMClient.Receipt(from: notice.from, messageID: notice.messageID, kind: notice.kind, serverTime: notice.serverTime)
            return [.emit(.receipt(receipt)), .reply(frame.ack(timestamp: timestamp))]
        case .presence(let notice):
            return [.emit(.presence(IMClient.Presence(user: notice.user, device: notice.device, status: notice.status, lastSeen: notice.lastSeen)))]
        case .kick(let kick):
            return [.emit(.kicked(kick.reason, kick.message))]
        case .error(let notice):
            return [.emit(.error(notice.code, notice.message))]
        case .publish(let publish):
            // ACKed in any case: an unACKed PUBLISH holds this device's session at the gateway.
            let ack = Action.reply(frame.ack(timestamp: timestamp))
            let payload = Array(publish.payload.readableBytesView)
            let first = publications.firstSighting(sender: publish.topic, messageID: Self.fingerprint(payload))
            guard first || !publish.resend else { return [ack] }
            let publication = IMClient.Publication(
                topic: publish.topic, payload: payload, qos: publish.qos, retain: publish.retain, serverTime: publish.serverTime)
            return [.emit(.publication(publication)), ack]
        case .location(let notice):
            return [.emit(.location(IMClient.Location(user: notice.user, device: notice.device, location: notice.location)))]
        case .historyPage(let page):
            return [.answer(page.refSequence, message)]
        case .conversationList(let list):
            return [.answer(list.refSequence, message)]
        case .readMarker(let marker):
            return [.emit(.readMarker(IMClient.ReadMarker(conversation: marker.conversation, readThrough: marker.readThrough, unread: marker.unread ?? 0)))]
        case .typing(let typing):
            guard let from = typing.from else { return [] }
            return [.emit(.typing(IMClient.TypingUpdate(from: from, group: typing.group, state: typing.state)))]
        default:
            // HELLO_OK, a late LOGIN_OK, or a client-to-gateway message: nothing to do.
            return []
        }
    }

    private mutating func reactBeforeLogin(to message: IMMessage) -> [Action] {
        switch message {
        case .loginOK(let ok):
            isLoggedIn = true
            if let position = ok.position, let status = ok.syncStatus {
                cursor.loggedIn(epoch: position.epoch, offset: position.offset, status: status)
            }
            return [.loggedIn(ok)]
        case .error(let notice):
            return [.loginRefused(notice.code, notice.message)]
        case .kick(let kick):
            return [.loginRefused(kick.reason, kick.message)]
        default:
            return []
        }
    }
}

extension InboundRouter {
    /// A payload's identity for de-duplication: its length and FNV-1a hash (PROTOCOL.md 10:
    /// PUBLISH frames flagged RESEND are de-duplicated by content).
    static func fingerprint(_ payload: [UInt8]) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in payload {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        return "\(payload.count):\(String(hash, radix: 16))"
    }
}
