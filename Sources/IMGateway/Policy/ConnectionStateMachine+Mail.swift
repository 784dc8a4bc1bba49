import IMWire
import Mosquitto
import NIOCore

/// What the connection's background work and its MQTT session send back
/// (``ConnectionMailbox``): handled in the order it came, whatever sent it.
extension ConnectionStateMachine {
    /// A batch of mail: each piece in order, then what it produced goes out.
    mutating func mailArrived(_ mail: [ConnectionMailbox.Mail]) {
        for item in mail { mailItem(item) }
        guard isLoggedIn else { return }
        writeDownlink()
        flushUplink()
    }

    /// One piece of mail.
    mutating func mailItem(_ mail: ConnectionMailbox.Mail) {
        switch mail {
        case .message(let message, let kind):
            switch state {
            case .authenticating:
                // Kept until LOGIN_OK is written.
                early.append(mail)
            case .loggedIn:
                received(message, kind)
            case .awaitingLogin, .closing, .closed, .finished:
                // Deliveries stay with the broker, which gives them to the device's next
                // connection.
                return
            }
        case .loginFinished(let outcome):
            loginFinished(outcome)
        case .leave(let reason, let promise):
            if let promise { emit(.whenFinished(promise)) }
            leave(reason)
        case .sessionEnded:
            sessionEnded()
        case .chatAnswered(let ticket, let verdict):
            answered(ticket, verdict)
        case .groupResolved(let group, let members):
            groupResolved(group, members)
        case .ownStored(let offsets):
            for offset in offsets { archiveDone(offset) }
        case .presenceWatchChanged(let users, let watching):
            let user = session?.user
            session?.downlink.watchChanged(users, watching: watching, own: user)
        case .replied(let ack, let sessionID):
            guard isLoggedIn else { return }
            reply(ack, sessionID: sessionID)
        case .answered(let message, let sessionID):
            guard isLoggedIn else { return }
            send(message, sessionID: sessionID)
        case .tokenVerified(let outcome, let header):
            tokenVerified(outcome, header)
        case .page(let result, let read):
            pageArrived(result, for: read)
        case .bounds(let found, let asked, let header):
            boundsArrived(found, asked: asked, answering: header)
        case .sessionFailed(let why):
            guard isLoggedIn else { return }
            log(.error, "cannot subscribe or announce presence", ["error": "\(why)"])
            brokerLost(why)
        case .lost(let reason, let lost):
            guard let session, session.mqttSession == lost else { return }
            if case .broker(.sessionTakenOver) = reason {
                // The device logged in through another gateway (or broker node): KICK
                // SESSION_TAKEN_OVER, as for a second login here, so it does not come back.
                if isLoggedIn { log(.info, "session taken over at the broker: the device logged in elsewhere") }
                leave(.takenOver)
            } else {
                // The MQTT connection ending (broker gone, session expired or refused) ends
                // the device connection: the device reconnects.
                brokerLost(sessionLost(reason))
            }
        }
    }

    /// Logs the loss of the MQTT session and returns what the device is told. A broker that
    /// ends a session for its quota (ejabberd's max_queue) drops what it queued for the device:
    /// that is said, counted and logged as such.
    private mutating func sessionLost(_ reason: LossReason) -> String {
        guard case .broker(.quotaExceeded) = reason else {
            if isLoggedIn { log(.warning, "MQTT session lost", ["reason": "\(reason)"]) }
            return "\(reason)"
        }
        statistics.brokerQuotaDisconnects.add(1, ordering: .relaxed)
        guard limits.archiveEpoch == nil else {
            log(.warning, "the broker ended the session: its queue for this device was full; the archive has what it held", ["reason": "\(reason)"])
            return "the broker ended the session because its queue for this device was full (\(ReasonCode.quotaExceeded)): what it held comes from the message archive at the next login"
        }
        log(.warning, "the broker ended the session: its queue for this device was full, and what it held is lost", ["reason": "\(reason)"])
        return "the broker ended the session because its queue for this device was full (\(ReasonCode.quotaExceeded)): messages it held for this device are lost"
    }

    // MARK: Messages of the MQTT session

    /// Turns a message of the MQTT session into a frame for the device (queued by priority), or
    /// acknowledges it at once.
    mutating func received(_ message: MosquittoMessage, _ kind: GatewayTopics.Kind?) {
        guard let user = session?.user else { return }
        switch kind {
        case .inbox:
            inboxMessage(message, kind)
        case .location(let sharer):
            // (Whether this device may watch the sharer was checked as it arrived.)
            if !message.payload.isEmpty,
               let payload = try? PayloadCodec.decode(LocationPayload.self, from: message.payload),
               payload.user == sharer, let notice = try? payload.notice() {
                session?.downlink.queue.enqueue(Downlink.Entry(message: .location(notice)), class: .location, coalescingKey: sharer)
            }
        case .pubsub(let clientTopic):
            let publish = Publish(
                topic: clientTopic, payload: ByteBuffer(bytes: message.payload), qos: IMQoS(message.qos),
                retain: message.retain, serverTime: clock.wallMilliseconds, resend: message.dup)
            if message.qos == .atMostOnce {
                session?.downlink.queue.enqueue(Downlink.Entry(message: .publish(publish)), class: .atMostOnce)
            } else {
                session?.downlink.queue.enqueue(Downlink.Entry(message: .publish(publish), deliveryID: message.deliveryID), class: .other)
            }
            counters.messagesOut.add(1, ordering: .relaxed)
        case .signal:
            signal(message, user: user)
        case .presence(let presenceUser, let device):
            let payload = message.payload.isEmpty ? nil : try? PayloadCodec.decode(PresencePayload.self, from: message.payload)
            presence(payload, user: presenceUser, device: device)
        case .receipts:
            // (Acknowledged at once on the MQTT loop: MosquittoDeviceSession.attach(to:).) Not for
            // a device that logged in with RECEIPT_NOTICES = 0.
            if session?.receiptNotices == true, let payload = try? PayloadCodec.decode(ReceiptPayload.self, from: message.payload),
               let notices = try? payload.notices() {
                for notice in notices { session?.downlink.queue.enqueue(Downlink.Entry(message: .receiptNotice(notice)), class: .receipt) }
            }
        default:
            return
        }
    }

    /// A chat for the device: delivered once, in the order of the user's stream (with the
    /// archive), unless it is a copy the device does not take.
    private mutating func inboxMessage(_ message: MosquittoMessage, _ kind: GatewayTopics.Kind?) {
        guard let payload = try? PayloadCodec.decode(ChatPayload.self, from: message.payload), var delivery = try? payload.delivery() else {
            log(.warning, "dropping an unreadable inbox message", ["topic": "\(message.topic)"])
            session?.uplink.acknowledge(message.deliveryID)
            return
        }
        // A message the archive stored: once, in order with what is caught up.
        var offset: UInt64?
        if let stored = payload.offset, session?.archive != nil, payload.epoch == limits.archiveEpoch {
            switch liveDecision(message, kind, offset: stored) {
            case .deliver:
                offset = stored
                delivery.streamOffset = stored
            case .duplicate:
                session?.uplink.acknowledge(message.deliveryID)
                return
            case .hold:
                // The archive holds it, above the device's position: it reaches the device from
                // here once what is below it did, or from the archive (a gap read, the next
                // login's catch-up). Its PUBACK goes now: under ack-through, a held delivery
                // would hold the session's writes, its own chats' publishes included, and what
                // it waits for may be one of them.
                session?.uplink.acknowledge(message.deliveryID)
                return
            }
        }
        // A repeat of a message the server API sent, published again by another gateway: the
        // device has it (or will, from the first copy). (With an offset of this archive, the
        // offset decided already.)
        if MessageAuthenticator.isSentByAPI(message.properties.correlationData),
           session?.downlink.isFirstAPIMessage(from: delivery.from, id: delivery.messageID) == false, offset == nil {
            session?.uplink.acknowledge(message.deliveryID)
            return
        }
        // A carbon for a device that wants none: done with it.
        if delivery.carbon && session?.downlink.wantsCarbons == false {
            session?.uplink.acknowledge(message.deliveryID)
            if let offset { archiveDone(offset) }
            return
        }
        delivery.resend = message.dup
        session?.downlink.queue.enqueue(
            Downlink.Entry(
                message: .delivery(delivery), deliveryID: message.deliveryID,
                // A carbon's ACK makes no "delivered" receipt.
                origin: delivery.carbon || delivery.deleted ? nil : PendingDeliveries.Origin(from: delivery.from, messageID: delivery.messageID),
                offset: offset),
            class: .chat)
        counters.messagesOut.add(1, ordering: .relaxed)
        // Messages held above a gap this one closed follow it.
        if offset != nil { releaseHeld() }
    }

    /// A message on a signal topic: a read marker of another device of the user, a typing
    /// state, a presence probe from another device, or a device's answer to this one's probe.
    private mutating func signal(_ message: MosquittoMessage, user: String) {
        guard let device = session?.device else { return }
        if let marker = try? PayloadCodec.decode(ReadMarkerPayload.self, from: message.payload) {
            // Another device of the user moved a read marker (its own session does not get it:
            // no-local).
            guard marker.device != device, let notice = marker.notice() else { return }
            session?.downlink.queue.enqueue(Downlink.Entry(message: .readMarker(notice)), class: .receipt)
        } else if let payload = try? PayloadCodec.decode(TypingPayload.self, from: message.payload) {
            // Typing: dropped when older than its lifetime (held up somewhere); a newer state of
            // the same sender and conversation replaces a queued one.
            guard let notice = try? payload.notice(), clock.wallMilliseconds <= payload.ts + UInt64(TypingState.lifetime) * 1000 else { return }
            session?.downlink.queue.enqueue(
                Downlink.Entry(message: .typing(notice)), class: .presence, coalescingKey: "typing/\(notice.from ?? "")/\(notice.group ?? "")")
        } else if let probe = try? PayloadCodec.decode(PresenceProbePayload.self, from: message.payload), probe.isValid {
            // Answered with the next uplink; one answer per asking device and batch.
            guard probe.from != user || probe.device != device else { return }
            _ = session?.uplink.probe(probe)
        } else if let answer = try? PayloadCodec.decode(PresenceAnswerPayload.self, from: message.payload),
                  answer.to == device, IMIdentifier.isValid(answer.user), IMIdentifier.isValid(answer.presence.device) {
            presence(answer.presence, user: answer.user, device: answer.presence.device)
        }
    }

    /// A device's presence (`nil`: cleared or unreadable), retained or live or in a probe's
    /// answer. For the user's own devices it says whether there is another to send carbons to
    /// (one with a presence has a session); it becomes a PRESENCE notice for a watched user
    /// (the own user only when the device watches it), unless the device was told this same
    /// presence already.
    private mutating func presence(_ payload: PresencePayload?, user: String, device: String) {
        guard let session else { return }
        if user == session.user {
            if device != session.device {
                self.session?.downlink.ownDevice(device, present: payload != nil)
            }
            guard session.downlink.ownPresenceWatched else { return }
        }
        guard let payload, payload.device == device, let notice = try? payload.notice(user: user),
              self.session?.downlink.isNews(user: user, payload) == true
        else { return }
        self.session?.downlink.queue.enqueue(
            Downlink.Entry(message: .presence(notice)), class: .presence, coalescingKey: "presence/\(user)/\(device)")
    }
}
