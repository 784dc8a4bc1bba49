import IMArchive
import Foundation
import IMWire
import Mosquitto
import NIOCore

extension DeviceConnection {
    // MARK: Requests of a logged-in device

    /// A request on a logged-in connection (anything but HEARTBEAT, HELLO, LOGIN, LOGOUT).
    func handleRequest(_ message: IMMessage, _ frame: IMFrame) {
        let header = frame.header
        switch message {
        case .ack(let ack):
            if let offset = machine.acknowledged(ack.sequence, now: now) { archiveDone(offset) }
        case .chat(let chat):
            lifetime.counters.messagesIn.add(1, ordering: .relaxed)
            startChat(chat, header)
        case .readReceipt(let receipt):
            guard IMIdentifier.isValidMessageID(receipt.messageID) else {
                reply(Ack.refusing(sequence: header.sequence, code: .badRequest, message: IMIdentifier.messageIDRule), to: header)
                return
            }
            // "delivered" before "read": gathered receipts go out first (the lane's publish
            // reaches the MQTT loop after this one).
            if machine.uplink.hasReceipts { startUplink(now: now, flushReceipts: true) }
            submit(.receipt(receipt), header)
        case .presenceWatch(let watch):
            submit(.watch(watch.users), header)
        case .presenceUnwatch(let unwatch):
            submit(.unwatch(unwatch.users), header)
        case .locationShareStart(let start):
            submit(.shareStart(start), header)
        case .locationShareStop:
            submit(.shareStop, header)
        case .locationUpdate(let update):
            locationUpdate(update, header)
        case .locationWatch(let watch):
            submit(.locationWatch(watch.users), header)
        case .locationUnwatch(let unwatch):
            submit(.locationUnwatch(unwatch.users), header)
        case .subscribe(let subscribe):
            submit(.subscribe(subscribe), header)
        case .unsubscribe(let unsubscribe):
            submit(.unsubscribe(unsubscribe), header)
        case .publish(let publish):
            submit(.publish(publish), header)
        case .typing(let typing):
            startTyping(typing, header)
        case .tokenRefresh(let refresh):
            refreshToken(refresh.token, header)
        case .sync(let sync):
            requestSync(sync, header)
        case .history(let query):
            submit(.history(query), header)
        case .conversations(let query):
            submit(.conversations(query), header)
        case .readMarker(let marker):
            submit(.readMarker(marker), header)
        case .delete(let request):
            submit(.delete(request), header)
        default:
            reply(Ack.refusing(sequence: header.sequence, code: .unknownOperation, message: "not supported by this gateway yet"), to: header)
        }
    }

    func reply(_ ack: Ack, to header: IMFrameHeader) {
        write(ack.frame(timestamp: unixSeconds(), sessionID: header.sessionID))
    }

    private func submit(_ job: DeviceRequests.Job, _ header: IMFrameHeader) {
        guard let link, let requests = link.requests else { return }
        link.lane.submit { await requests.run(job, header: header) }
    }

    /// The time on the event loop's clock, which every deadline and rate of the connection uses.
    var now: NIODeadline { output?.context.eventLoop.now ?? .now() }

    /// Checked here, at once: the share (PROTOCOL.md 6.7) and the rate limit.
    private func locationUpdate(_ update: LocationUpdate, _ header: IMFrameHeader) {
        guard let session else { return }
        let location = gateway.configuration.location
        guard let share = gateway.shares.isSharing(session.user) else {
            reply(Ack.refusing(sequence: header.sequence, code: .forbidden, message: "start sharing first"), to: header)
            return
        }
        guard machine.rates.admitLocation(now: now) else {
            reply(Ack.refusing(sequence: header.sequence, code: .rateLimited,
                message: "at most \(location.maxUpdatesPerSecond) updates per second"), to: header)
            return
        }
        // Shares expire on the wall clock (every gateway sees the same expiry).
        let left = UInt32(share.remaining(now: Date.now.timeIntervalSince1970).rounded(.up))
        submit(.locationUpdate(update, expiry: min(UInt32(clamping: location.retainExpiry), left)), header)
    }

    // MARK: Chat: the fast path

    /// Validates a chat message and gathers it for ``startUplink(now:flushReceipts:ending:)``,
    /// which hands it to ``ChatAcceptance``; its verdict comes back as mail (``answered(_:_:timestamp:)``).
    /// A group chat needs its members: known already (the group is followed), or looked up,
    /// and the chats behind it wait for that, so that they go in the order the device sent
    /// them (``groupResolved(_:_:)``).
    private func startChat(_ chat: ChatSend, _ header: IMFrameHeader) {
        guard let session, let link else { return }
        do {
            try IMIdentifier.validate(chat.to, kind: chat.isGroup ? .group : .user)
        } catch {
            reply(Ack.refusing(sequence: header.sequence, code: .invalidUserID, message: "\(error)"), to: header)
            return
        }
        guard IMIdentifier.isValidMessageID(chat.messageID) else {
            reply(Ack.refusing(sequence: header.sequence, code: .badRequest, message: IMIdentifier.messageIDRule), to: header)
            return
        }
        guard admitChat(chat, header) else { return }
        var pending = PendingChat(
            chat: ChatAcceptance.Chat(
                send: chat, from: session.user, device: session.device, recipients: chat.isGroup ? [] : [chat.to],
                ownCopy: gateway.archive != nil, carbon: machine.downlink.makesCarbons, serverTime: unixMilliseconds(),
                window: link.brokerFit.publishWindow),
            ticket: .init(messageID: chat.messageID, sequence: header.sequence, sessionID: header.sessionID))
        guard chat.isGroup else { return machine.uplink.enqueue(pending) }
        guard let members = gateway.groups.knownMembers(of: chat.to) else {
            machine.uplink.enqueue(pending, ready: false)
            lookUpGroup(chat.to)
            return
        }
        guard members[session.user] != nil else {
            reply(Ack.refusing(sequence: header.sequence, code: .forbidden, message: "\(session.user) is not a member of \(chat.to)"), to: header)
            return
        }
        pending.chat.recipients = members.keys.filter { $0 != session.user }.sorted()
        machine.uplink.enqueue(pending)
    }

    /// Looks `group`'s members up off the event loop; they come back as mail.
    private func lookUpGroup(_ group: String) {
        guard let mailbox else { return }
        let groups = gateway.groups
        Task {
            let members: Result<[String: UInt64], any Error>
            do { members = .success(try await groups.members(of: group)) } catch { members = .failure(error) }
            mailbox.post(.groupResolved(group, members))
        }
    }

    /// The members of `group` (or why they could not be read): its chats waiting for them go
    /// on, or are refused (FORBIDDEN for a user who is not a member).
    func groupResolved(_ group: String, _ members: Result<[String: UInt64], any Error>) {
        guard let session else { return }
        let user = session.user
        var refusals: [(PendingChat, Ack)] = []
        let dropped = machine.uplink.resolve { pending in
            guard pending.chat.send.isGroup, pending.chat.send.to == group else { return nil }
            let sequence = pending.ticket.sequence
            switch members {
            case .success(let members) where members[user] != nil:
                var ready = pending
                ready.chat.recipients = members.keys.filter { $0 != user }.sorted()
                return .some(ready)
            case .success:
                refusals.append((pending, Ack.refusing(sequence: sequence, code: .forbidden, message: "\(user) is not a member of \(group)")))
            case .failure(let error as ArchiveError):
                refusals.append((pending, Ack.storeUnavailable(sequence: sequence, retryAfter: error.retryAfter ?? 1_000, message: error.message)))
            case .failure(let error):
                refusals.append((pending, Ack.refusing(sequence: sequence, code: .brokerUnavailable, message: "\(error)")))
            }
            return .some(nil)
        }
        assert(dropped.count == refusals.count)
        let timestamp = unixSeconds()
        for (pending, ack) in refusals { write(ack.frame(timestamp: timestamp, sessionID: pending.ticket.sessionID)) }
    }

    /// What ``ChatAcceptance`` made of a chat the device sent: ACK it (with its offset in the
    /// user's stream), or refuse it. Its own copy is done for this device.
    func answered(_ ticket: ConnectionMailbox.ChatTicket, _ verdict: ChatAcceptance.Verdict, timestamp: UInt32) {
        if ticket.inUplink { machine.uplink.settled() }
        let reply = { (ack: Ack) in self.write(ack.frame(timestamp: timestamp, sessionID: ticket.sessionID)) }
        switch verdict {
        case .accepted(let accepted):
            for offset in accepted.done { archiveDone(offset) }
            gateway.statistics.chatAcknowledged(since: ticket.startedAt)
            reply(Ack(sequence: ticket.sequence, messageID: ticket.messageID, serverTime: accepted.serverTime, streamOffset: accepted.ownOffset))
        case .reused:
            reply(Ack.refusing(sequence: ticket.sequence, code: .messageIDReused,
                message: "message id \(ticket.messageID) was already used for another message"))
        case .storeUnavailable(let retry, let message):
            machine.rates.hold(messageID: ticket.messageID, retryAfter: retry, now: now)
            reply(Ack.storeUnavailable(sequence: ticket.sequence, retryAfter: retry, message: message))
        case .notPublished(let why):
            reply(Ack.refusing(sequence: ticket.sequence, code: .brokerUnavailable, message: why))
        }
    }

    /// TYPING (PROTOCOL.md 6.13): TO or GROUP, within the rate limit; sent on the request lane.
    private func startTyping(_ typing: Typing, _ header: IMFrameHeader) {
        guard (typing.to == nil) != (typing.group == nil) else {
            reply(Ack.refusing(sequence: header.sequence, code: .badRequest, message: "TYPING names TO or GROUP, one of them"), to: header)
            return
        }
        if let wait = machine.rates.admitTyping(now: now) {
            reply(Ack.rateLimited(sequence: header.sequence, retryAfter: wait,
                message: "at most \(DeviceRateLimits.typingRate) typing signals per second"), to: header)
            return
        }
        submit(.typing(typing), header)
    }

    /// The chat rate limit (PROTOCOL.md 6.3): false, with the negative ACK sent, past it.
    private func admitChat(_ chat: ChatSend, _ header: IMFrameHeader) -> Bool {
        if chat.qos == .exactlyOnce, let brokerFit = link?.brokerFit, brokerFit.maximumQoS < .exactlyOnce {
            // A PUBLISH above the broker's Maximum QoS would end the session.
            reply(Ack.refusing(sequence: header.sequence, code: .qosNotSupported,
                message: "the broker takes at most QoS \(brokerFit.maximumQoS.rawValue): send with QoS 1 (HELLO_OK offers no QOS2_CHAT)"), to: header)
            return false
        }
        switch machine.admitChat(messageID: chat.messageID, now: now) {
        case .allow:
            return true
        case .held(let wait):
            reply(Ack.storeUnavailable(sequence: header.sequence, retryAfter: wait,
                message: "an earlier message could not be stored: send it again first, in \(wait) ms"), to: header)
            return false
        case .refuse(let retryAfter, _):
            // Nothing more is read before the pause the machine set ends.
            armTimer()
            let limits = gateway.configuration.limits
            gateway.statistics.chatRateLimited.add(1, ordering: .relaxed)
            let rate = limits.chatRate.rounded() == limits.chatRate ? String(Int(limits.chatRate)) : String(limits.chatRate)
            reply(Ack.rateLimited(sequence: header.sequence, retryAfter: retryAfter,
                message: "more than \(rate) chat messages per second; retry in \(retryAfter) ms"), to: header)
            return false
        }
    }

    /// Hands what this read burst (or mailbox batch) gathered to the MQTT client, in one
    /// visit to its loop (``ConnectionStateMachine/takeUplink(now:flushReceipts:ending:)``
    /// decides what goes): acknowledgements of deliveries first (under ack-through they
    /// release the session's writes), then "delivered" receipts (one per sender), then the
    /// chat publishes in the order they came. Chat outcomes come back as mail.
    ///
    /// Only while the session is open: `ending` is the last call, made as it starts ending.
    func startUplink(now: NIODeadline, flushReceipts: Bool = false, ending: Bool = false) {
        guard let session, let mailbox, ending || machine.isSessionOpen else { return }
        savePosition()
        let work = machine.takeUplink(now: now, flushReceipts: flushReceipts, ending: ending)
        backpressureChanged()
        // Receipts gathered now are due within their window.
        armTimer()
        guard let work else { return }
        let batch = UplinkBatch(
            acknowledgements: work.acknowledgements,
            receipts: Self.bySender(work.receipts).map { group in
                (session.receipt(.delivered, to: group.sender, messageIDs: group.ids), group.ids[0])
            },
            presenceAnswers: work.probes.map(session.presenceAnswer(to:)))
        if !batch.isEmpty { session.send(batch, logger: logger) }
        for pending in work.chats {
            let ticket = pending.ticket
            acceptance.accept(pending.chat, via: session, logger: logger) { mailbox.post(.chatAnswered(ticket, $0)) }
        }
    }

    /// Message ids grouped by sender, senders and ids in the order they came.
    static func bySender(_ origins: [PendingDeliveries.Origin]) -> [(sender: String, ids: [String])] {
        var groups: [(sender: String, ids: [String])] = []
        var index: [String: Int] = [:]
        for origin in origins {
            if let at = index[origin.from] {
                groups[at].ids.append(origin.messageID)
            } else {
                index[origin.from] = groups.count
                groups.append((origin.from, [origin.messageID]))
            }
        }
        return groups
    }

    // MARK: From the MQTT side

    /// Takes the mailbox's batch (on the event loop).
    func drainMailbox() {
        guard let mailbox else { return }
        switch machine.mailArrived(mailbox.take()) {
        case .held:
            return
        case .handle(let mail):
            receive(mail)
        case .settleOnly:
            // Deliveries stay with the broker; a chat the device sent goes its way without it
            // (``ChatAcceptance``).
            return
        }
    }

    /// Handles mail in order, then writes what it produced.
    func receive(_ mail: [ConnectionMailbox.Mail]) {
        guard !mail.isEmpty else { return }
        let timestamp = unixSeconds()
        for item in mail {
            switch item {
            case .message(let message, let kind):
                receive(message, kind)
            case .chatAnswered(let ticket, let verdict):
                answered(ticket, verdict, timestamp: timestamp)
            case .groupResolved(let group, let members):
                groupResolved(group, members)
            case .ownStored(let offset):
                archiveDone(offset)
            case .presenceWatchChanged(let users, let watching):
                machine.downlink.watchChanged(users, watching: watching, own: session?.user)
            case .replied(let ack, let sessionID):
                write(ack.frame(timestamp: timestamp, sessionID: sessionID))
            case .answered(let message, let sessionID):
                send(message, sessionID: sessionID)
            case .sessionFailed(let why):
                logger.error("cannot subscribe or announce presence", metadata: ["error": "\(why)"])
                perform(machine.handle(.brokerLost(why)))
            case .lost(let reason, let lost):
                guard let session, ObjectIdentifier(session) == lost else { continue }
                if case .broker(.sessionTakenOver) = reason {
                    // The device logged in through another gateway (or broker node): KICK
                    // SESSION_TAKEN_OVER, as for a second login here, so it does not come back.
                    if machine.isLoggedIn { logger.info("session taken over at the broker: the device logged in elsewhere") }
                    perform(machine.handle(.takenOver))
                } else {
                    // The MQTT connection ending (broker gone, session expired or refused)
                    // ends the device connection: the device reconnects.
                    perform(machine.handle(.brokerLost(sessionLost(reason))))
                }
            }
        }
        writeDownlink()
        startUplink(now: now)
        flushIfNeeded()
    }

    /// Logs the loss of the MQTT session and returns what the device is told. A broker that
    /// ends a session for its quota (ejabberd's max_queue) drops what it queued for the
    /// device: that is said, counted and logged as such.
    private func sessionLost(_ reason: LossReason) -> String {
        guard case .broker(.quotaExceeded) = reason else {
            if machine.isLoggedIn { logger.warning("MQTT session lost", metadata: ["reason": "\(reason)"]) }
            return "\(reason)"
        }
        gateway.statistics.brokerQuotaDisconnects.add(1, ordering: .relaxed)
        guard gateway.archive == nil else {
            logger.warning(
                "the broker ended the session: its queue for this device was full; the archive has what it held",
                metadata: ["reason": "\(reason)"])
            return "the broker ended the session because its queue for this device was full (\(ReasonCode.quotaExceeded)): what it held comes from the message archive at the next login"
        }
        logger.warning(
            "the broker ended the session: its queue for this device was full, and what it held is lost",
            metadata: ["reason": "\(reason)"])
        return "the broker ended the session because its queue for this device was full (\(ReasonCode.quotaExceeded)): messages it held for this device are lost"
    }

    /// Tells the machine how many chat messages wait; reads again if it says so.
    func backpressureChanged() {
        if machine.chatsChanged(), let context = output?.context { context.read() }
    }

    /// Turns a message of the MQTT session into a frame for the device (queued by
    /// priority), or acknowledges it at once.
    func receive(_ message: MosquittoMessage, _ kind: GatewayTopics.Kind?) {
        guard let session else { return }
        switch kind {
        case .inbox:
            guard let payload = try? PayloadCodec.decode(ChatPayload.self, from: message.payload),
                  var delivery = try? payload.delivery()
            else {
                logger.warning("dropping an unreadable inbox message", metadata: ["topic": "\(message.topic)"])
                machine.uplink.acknowledge(message.deliveryID)
                return
            }
            // A message the archive stored: once, in order with what is caught up.
            var offset: UInt64?
            if let stored = payload.offset, machine.archive != nil, payload.epoch == gateway.archive?.epoch.rawValue {
                switch liveDecision(message, kind, offset: stored) {
                case .deliver:
                    offset = stored
                    delivery.streamOffset = stored
                case .duplicate:
                    machine.uplink.acknowledge(message.deliveryID)
                    return
                case .hold:
                    return
                }
            }
            // A repeat of a message the server API sent, published again by another gateway:
            // the device has it (or will, from the first copy). (With an offset of this
            // archive, the offset decided already.)
            if MessageAuthenticator.isSentByAPI(message.properties.correlationData),
               !machine.downlink.isFirstAPIMessage(from: delivery.from, id: delivery.messageID), offset == nil {
                machine.uplink.acknowledge(message.deliveryID)
                return
            }
            // A carbon for a device that wants none: done with it.
            if delivery.carbon && !machine.downlink.wantsCarbons {
                machine.uplink.acknowledge(message.deliveryID)
                if let offset { archiveDone(offset) }
                return
            }
            delivery.resend = message.dup
            machine.downlink.queue.enqueue(
                Downlink.Entry(message: .delivery(delivery), deliveryID: message.deliveryID,
                              // A carbon's ACK makes no "delivered" receipt.
                              origin: delivery.carbon || delivery.deleted ? nil : PendingDeliveries.Origin(from: delivery.from, messageID: delivery.messageID),
                              offset: offset),
                class: .chat)
            lifetime.counters.messagesOut.add(1, ordering: .relaxed)
            // Messages held above a gap this one closed follow it.
            if offset != nil { releaseHeld() }
        case .location(let sharer):
            // Checked again at each position: a stopped or expired share (or one whose
            // audience changed) stops the stream at once.
            if !message.payload.isEmpty, gateway.shares.canWatch(watcher: session.user, sharer: sharer),
               let payload = try? PayloadCodec.decode(LocationPayload.self, from: message.payload),
               payload.user == sharer, let notice = try? payload.notice() {
                machine.downlink.queue.enqueue(Downlink.Entry(message: .location(notice)), class: .location, coalescingKey: sharer)
            }
        case .pubsub(let clientTopic):
            let publish = Publish(
                topic: clientTopic, payload: ByteBuffer(bytes: message.payload), qos: IMQoS(message.qos),
                retain: message.retain, serverTime: unixMilliseconds(), resend: message.dup)
            if message.qos == .atMostOnce {
                machine.downlink.queue.enqueue(Downlink.Entry(message: .publish(publish)), class: .atMostOnce)
            } else {
                machine.downlink.queue.enqueue(Downlink.Entry(message: .publish(publish), deliveryID: message.deliveryID), class: .other)
            }
            lifetime.counters.messagesOut.add(1, ordering: .relaxed)
        case .signal:
            signal(message, session)
        case .presence(let user, let device):
            let payload = message.payload.isEmpty ? nil : try? PayloadCodec.decode(PresencePayload.self, from: message.payload)
            presence(payload, user: user, device: device, session)
        case .receipts:
            // (Acknowledged at once on the MQTT loop: MosquittoDeviceSession.attach(to:).) Not for a
            // device that logged in with RECEIPT_NOTICES = 0.
            if session.receiptNotices, let payload = try? PayloadCodec.decode(ReceiptPayload.self, from: message.payload), let notices = try? payload.notices() {
                for notice in notices { machine.downlink.queue.enqueue(Downlink.Entry(message: .receiptNotice(notice)), class: .receipt) }
            }
        default:
            return
        }
    }

    /// A message on a signal topic: a typing state, a presence probe from another device, or
    /// a device's answer to this one's probe.
    private func signal(_ message: MosquittoMessage, _ session: any DeviceSession) {
        if let marker = try? PayloadCodec.decode(ReadMarkerPayload.self, from: message.payload) {
            // Another device of the user moved a read marker (its own session does not get it:
            // no-local).
            guard marker.device != session.device, let notice = marker.notice() else { return }
            machine.downlink.queue.enqueue(Downlink.Entry(message: .readMarker(notice)), class: .receipt)
        } else if let payload = try? PayloadCodec.decode(TypingPayload.self, from: message.payload) {
            // Typing: dropped when older than its lifetime (held up somewhere); a newer state
            // of the same sender and conversation replaces a queued one.
            guard let notice = try? payload.notice(), unixMilliseconds() <= payload.ts + UInt64(TypingState.lifetime) * 1000 else { return }
            machine.downlink.queue.enqueue(Downlink.Entry(message: .typing(notice)), class: .presence, coalescingKey: "typing/\(notice.from ?? "")/\(notice.group ?? "")")
        } else if let probe = try? PayloadCodec.decode(PresenceProbePayload.self, from: message.payload), probe.isValid {
            // Answered with the next uplink batch; one answer per asking device and batch.
            guard probe.from != session.user || probe.device != session.device else { return }
            _ = machine.uplink.probe(probe)
        } else if let answer = try? PayloadCodec.decode(PresenceAnswerPayload.self, from: message.payload),
                  answer.to == session.device, IMIdentifier.isValid(answer.user), IMIdentifier.isValid(answer.presence.device) {
            presence(answer.presence, user: answer.user, device: answer.presence.device, session)
        }
    }

    /// A device's presence (`nil`: cleared or unreadable), retained or live or in a probe's
    /// answer. For the user's own devices it says whether there is another to send carbons
    /// to (one with a presence has a session); it becomes a PRESENCE notice for a watched
    /// user (the own user only when the device watches it), unless the device was told
    /// this same presence already.
    private func presence(_ payload: PresencePayload?, user: String, device: String, _ session: any DeviceSession) {
        if user == session.user {
            if device != session.device {
                machine.downlink.ownDevice(device, present: payload != nil)
            }
            guard machine.downlink.ownPresenceWatched else { return }
        }
        guard let payload, payload.device == device, let notice = try? payload.notice(user: user),
              machine.downlink.isNews(user: user, payload)
        else { return }
        machine.downlink.queue.enqueue(Downlink.Entry(message: .presence(notice)), class: .presence, coalescingKey: "presence/\(user)/\(device)")
    }

    /// Writes queued frames in priority order while the socket takes them. When the device
    /// reads slowly, the rest waits in the queue, where chat goes first and a newer
    /// presence or position replaces a queued one.
    func writeDownlink() {
        guard let context = output?.context else { return }
        let timestamp = unixSeconds()
        let now = context.eventLoop.now
        let sessionID = machine.sessionID
        var awaited = false
        while context.channel.isWritable, let (entry, number) = machine.nextFrame(now: now) {
            awaited = awaited || entry.isAwaited
            write(entry.message.frame(sequence: number, timestamp: timestamp, sessionID: sessionID))
        }
        writeSyncAcks()
        // The delivery ACK deadline may now come before the armed one.
        if awaited { armTimer() }
    }
}
