import IMArchive
import IMWire
import NIOCore

/// What a logged-in device sends (anything but HEARTBEAT, HELLO, LOGIN, LOGOUT): chat, the
/// ACKs of deliveries, and requests, checked here and handed on as actions.
extension ConnectionStateMachine {
    /// A request on a logged-in connection.
    mutating func request(_ message: IMMessage, _ header: IMFrameHeader) {
        switch message {
        case .chat(let chat):
            counters.messagesIn.add(1, ordering: .relaxed)
            startChat(chat, header)
        case .readReceipt(let receipt):
            guard IMIdentifier.isValidMessageID(receipt.messageID) else { return refuse(header, .badRequest, IMIdentifier.messageIDRule) }
            // "delivered" before "read": gathered receipts go out first (the lane's publish
            // reaches the MQTT loop after this one).
            if session?.uplink.hasReceipts == true { flushUplink(flushReceipts: true) }
            emit(.request(.receipt(receipt), header))
        case .presenceWatch(let watch):
            emit(.request(.watch(watch.users), header))
        case .presenceUnwatch(let unwatch):
            emit(.request(.unwatch(unwatch.users), header))
        case .locationShareStart(let start):
            emit(.request(.shareStart(start), header))
        case .locationShareStop:
            emit(.request(.shareStop, header))
        case .locationUpdate(let update):
            // The rate here; the share (PROTOCOL.md 6.7) on the request lane.
            let now = clock.now
            guard session?.rates.admitLocation(now: now) == true else {
                return reply(Ack.refusing(sequence: header.sequence, code: .rateLimited,
                    message: "at most \(limits.locationRate) updates per second"), sessionID: header.sessionID)
            }
            emit(.request(.locationUpdate(update), header))
        case .locationWatch(let watch):
            emit(.request(.locationWatch(watch.users), header))
        case .locationUnwatch(let unwatch):
            emit(.request(.locationUnwatch(unwatch.users), header))
        case .subscribe(let subscribe):
            emit(.request(.subscribe(subscribe), header))
        case .unsubscribe(let unsubscribe):
            emit(.request(.unsubscribe(unsubscribe), header))
        case .publish(let publish):
            emit(.request(.publish(publish), header))
        case .typing(let typing):
            startTyping(typing, header)
        case .tokenRefresh(let refresh):
            emit(.verifyToken(refresh.token, header))
        case .sync(let sync):
            requestSync(sync, header)
        case .history(let query):
            emit(.request(.history(query), header))
        case .conversations(let query):
            emit(.request(.conversations(query), header))
        case .readMarker(let marker):
            emit(.request(.readMarker(marker), header))
        case .delete(let request):
            emit(.request(.delete(request), header))
        default:
            refuse(header, .unknownOperation, "not supported by this gateway yet")
        }
    }

    /// The device ACKed the frame `sequence`: the MQTT delivery it settles is acknowledged,
    /// its "delivered" receipt gathered with the next uplink, its offset done.
    mutating func acknowledged(_ sequence: UInt32) {
        guard let settled = session?.deliveries.remove(sequence) else { return }
        if let deliveryID = settled.deliveryID { session?.uplink.acknowledge(deliveryID) }
        if let origin = settled.origin {
            let now = clock.now
            session?.uplink.delivered(origin, now: now)
        }
        if let offset = settled.offset { archiveDone(offset) }
    }

    // MARK: Chat

    /// Checks a chat message and queues it for ``ChatAcceptance`` (``flushUplink(flushReceipts:ending:)``);
    /// its verdict comes back as mail (``answered(_:_:)``). A group chat needs its members
    /// first (``ConnectionAction/lookUpGroup(_:)``), and the chats behind it wait for them, so
    /// that the device's chats go in the order it sent them (``groupResolved(_:_:)``).
    private mutating func startChat(_ chat: ChatSend, _ header: IMFrameHeader) {
        guard let session else { return }
        do {
            try IMIdentifier.validate(chat.to, kind: chat.isGroup ? .group : .user)
        } catch {
            return refuse(header, .invalidUserID, "\(error)")
        }
        guard IMIdentifier.isValidMessageID(chat.messageID) else { return refuse(header, .badRequest, IMIdentifier.messageIDRule) }
        guard admitChat(chat, header) else { return }
        let pending = PendingChat(
            chat: ChatAcceptance.Chat(
                send: chat, from: session.user, device: session.device, recipients: chat.isGroup ? [] : [chat.to],
                ownCopy: limits.archiveEpoch != nil, carbon: session.downlink.makesCarbons, serverTime: clock.wallMilliseconds,
                window: session.publishWindow),
            ticket: ConnectionMailbox.ChatTicket(messageID: chat.messageID, sequence: header.sequence, sessionID: header.sessionID, startedAt: clock.now))
        self.session?.uplink.enqueue(pending, ready: !chat.isGroup)
        if chat.isGroup { emit(.lookUpGroup(chat.to)) }
    }

    /// The QoS the broker takes and the rate limit (PROTOCOL.md 6.3): false, with the negative
    /// ACK sent, past them.
    private mutating func admitChat(_ chat: ChatSend, _ header: IMFrameHeader) -> Bool {
        guard let session else { return false }
        if chat.qos == .exactlyOnce, session.maximumQoS < .exactlyOnce {
            // A PUBLISH above the broker's Maximum QoS would end the session.
            refuse(header, .qosNotSupported,
                "the broker takes at most QoS \(session.maximumQoS.rawValue): send with QoS 1 (HELLO_OK offers no QOS2_CHAT)")
            return false
        }
        let now = clock.now
        switch self.session?.rates.admitChat(messageID: chat.messageID, now: now) ?? .allow {
        case .allow:
            return true
        case .held(let wait):
            reply(Ack.storeUnavailable(sequence: header.sequence, retryAfter: wait,
                message: "an earlier message could not be stored: send it again first, in \(wait) ms"), sessionID: header.sessionID)
            return false
        case .refuse(let retryAfter, let until):
            // Nothing more is read before the pause ends.
            reading.pause(until: until)
            statistics.chatRateLimited.add(1, ordering: .relaxed)
            let rate = limits.chatRate.rounded() == limits.chatRate ? String(Int(limits.chatRate)) : String(limits.chatRate)
            reply(Ack.rateLimited(sequence: header.sequence, retryAfter: retryAfter,
                message: "more than \(rate) chat messages per second; retry in \(retryAfter) ms"), sessionID: header.sessionID)
            return false
        }
    }

    /// The members of `group` (or why they could not be read): its chats waiting for them go
    /// on, or are refused (FORBIDDEN for a user who is not a member). Chats resolved after the
    /// session started ending are handed over at once (``ChatAcceptance`` publishes them
    /// through the gateway's own session).
    mutating func groupResolved(_ group: String, _ members: Result<[String: UInt64], any Error>) {
        guard let user = session?.user else { return }
        var refusals: [(ack: Ack, sessionID: UInt16)] = []
        _ = session?.uplink.resolve { pending in
            guard pending.chat.send.isGroup, pending.chat.send.to == group else { return nil }
            let sequence = pending.ticket.sequence
            switch members {
            case .success(let members) where members[user] != nil:
                var ready = pending
                ready.chat.recipients = members.keys.filter { $0 != user }.sorted()
                return .some(ready)
            case .success:
                refusals.append((Ack.refusing(sequence: sequence, code: .forbidden, message: "\(user) is not a member of \(group)"), pending.ticket.sessionID))
            case .failure(let error as ArchiveError):
                refusals.append((Ack.storeUnavailable(sequence: sequence, retryAfter: error.retryAfter ?? 1_000, message: error.message), pending.ticket.sessionID))
            case .failure(let error):
                refusals.append((Ack.refusing(sequence: sequence, code: .brokerUnavailable, message: "\(error)"), pending.ticket.sessionID))
            }
            return .some(nil)
        }
        if isLoggedIn {
            for refusal in refusals { reply(refusal.ack, sessionID: refusal.sessionID) }
        } else if !isSessionOpen, let chats = session?.uplink.takeReady(), !chats.isEmpty {
            emit(.accept(chats))
        }
    }

    /// What ``ChatAcceptance`` made of a chat the device sent: ACK it (with its offset in the
    /// user's stream), or refuse it. Its own copy is done for this device.
    mutating func answered(_ ticket: ConnectionMailbox.ChatTicket, _ verdict: ChatAcceptance.Verdict) {
        if ticket.inUplink { session?.uplink.settled() }
        guard isLoggedIn else { return }
        switch verdict {
        case .accepted(let accepted):
            for offset in accepted.done { archiveDone(offset) }
            statistics.chatAcknowledged(since: ticket.startedAt, now: clock.now)
            reply(Ack(sequence: ticket.sequence, messageID: ticket.messageID, serverTime: accepted.serverTime, streamOffset: accepted.ownOffset),
                  sessionID: ticket.sessionID)
        case .reused:
            reply(Ack.refusing(sequence: ticket.sequence, code: .messageIDReused,
                message: "message id \(ticket.messageID) was already used for another message"), sessionID: ticket.sessionID)
        case .storeUnavailable(let retry, let message):
            let now = clock.now
            session?.rates.hold(messageID: ticket.messageID, retryAfter: retry, now: now)
            reply(Ack.storeUnavailable(sequence: ticket.sequence, retryAfter: retry, message: message), sessionID: ticket.sessionID)
        case .notPublished(let why):
            reply(Ack.refusing(sequence: ticket.sequence, code: .brokerUnavailable, message: why), sessionID: ticket.sessionID)
        }
    }

    /// TYPING (PROTOCOL.md 6.13): TO or GROUP, within the rate limit; sent on the request lane.
    private mutating func startTyping(_ typing: Typing, _ header: IMFrameHeader) {
        guard (typing.to == nil) != (typing.group == nil) else { return refuse(header, .badRequest, "TYPING names TO or GROUP, one of them") }
        let now = clock.now
        if let wait = session?.rates.admitTyping(now: now) {
            return reply(Ack.rateLimited(sequence: header.sequence, retryAfter: wait,
                message: "at most \(DeviceRateLimits.typingRate) typing signals per second"), sessionID: header.sessionID)
        }
        emit(.request(.typing(typing), header))
    }

    // MARK: The uplink

    /// Hands on what this turn gathered (``Uplink/take(now:flush:)`` decides what goes): the
    /// acknowledgements of deliveries, "delivered" receipts (one per sender) and presence
    /// answers to the MQTT session, then the chats, in the order they came, to
    /// ``ChatAcceptance``. Only while the session is open: `ending` is the last call, made as it
    /// starts ending. The device's position is saved when it moved.
    mutating func flushUplink(flushReceipts: Bool = false, ending: Bool = false) {
        guard ending || isSessionOpen, session != nil else { return }
        savePosition()
        let now = clock.now
        let work = session?.uplink.take(now: now, flush: flushReceipts, ending: ending)
        chatsChanged()
        guard let work else { return }
        if !(work.acknowledgements.isEmpty && work.receipts.isEmpty && work.probes.isEmpty) {
            emit(.uplink(UplinkWork(acknowledgements: work.acknowledgements, receipts: Self.bySender(work.receipts), probes: work.probes)))
        }
        if !work.chats.isEmpty { emit(.accept(work.chats)) }
    }

    /// Message ids grouped by sender, senders and ids in the order they came.
    static func bySender(_ origins: [PendingDeliveries.Origin]) -> [DeliveredReceipt] {
        var groups: [DeliveredReceipt] = []
        var index: [String: Int] = [:]
        for origin in origins {
            if let at = index[origin.from] {
                groups[at].ids.append(origin.messageID)
            } else {
                index[origin.from] = groups.count
                groups.append(DeliveredReceipt(sender: origin.from, ids: [origin.messageID]))
            }
        }
        return groups
    }

    // MARK: Token refresh (PROTOCOL.md 6.1.1)

    /// The verdict on a TOKEN_REFRESH's token: the session's deadline moves and the ACK names
    /// the new expiry, or a negative ACK says why (the session goes on until the current
    /// token's deadline).
    mutating func tokenVerified(_ outcome: Result<UInt64, LoginRefusal>, _ header: IMFrameHeader) {
        guard isLoggedIn else { return }
        switch outcome {
        case .success(let expiresAt):
            tokenDeadline = deadline(ofTokenExpiringAt: expiresAt)
            reply(Ack.tokenRefreshed(sequence: header.sequence, tokenExpiry: expiresAt), sessionID: header.sessionID)
            log(.info, "token refreshed", ["expires": "\(expiresAt)"])
        case .failure(let refusal):
            log(.notice, "token refresh refused", ["error": "\(refusal.message)"])
            reply(Ack.refusing(sequence: header.sequence, code: refusal.code, message: refusal.message), sessionID: header.sessionID)
        }
    }
}
