import IMWire
import NIOCore

/// The data path of a logged-in connection: what goes to the device (``Downlink``), what goes
/// to the MQTT side (``Uplink``), the device's rate limits, mail that came before LOGIN_OK,
/// and the sequence numbers of what the gateway sends. The handler asks the machine and does
/// what it answers; the machine reads no clock (`now` is the event loop's).
extension ConnectionStateMachine {
    /// Where a batch of mail from the MQTT side goes.
    enum MailRoute {
        /// Kept until LOGIN_OK is written (``takeEarlyMail()``).
        case held
        /// Handled now, in order.
        case handle([ConnectionMailbox.Mail])
        /// The connection is not (or no longer) logged in: deliveries stay with the broker,
        /// which gives them to the device's next connection; only what must happen whether
        /// or not the device hears of it (a chat the broker took) is done.
        case settleOnly([ConnectionMailbox.Mail])
    }

    /// The sequence number of the next frame the gateway sends (1, 2, ...; wraps after
    /// 2^32 - 1, skipping 0).
    mutating func nextSequence() -> UInt32 {
        self.lastSequence &+= 1
        if self.lastSequence == 0 { self.lastSequence = 1 }
        return self.lastSequence
    }

    /// Mail arrived from the MQTT side: where it goes in this state.
    mutating func mailArrived(_ mail: [ConnectionMailbox.Mail]) -> MailRoute {
        switch self.state {
        case .authenticating:
            self.early.append(contentsOf: mail)
            return .held
        case .loggedIn:
            return .handle(mail)
        case .awaitingLogin, .closing, .closed, .finished:
            return .settleOnly(mail)
        }
    }

    /// The mail held until LOGIN_OK.
    mutating func takeEarlyMail() -> [ConnectionMailbox.Mail] {
        defer { self.early = [] }
        return self.early
    }

    /// The device ACKed the frame `sequence` at `now`: the MQTT delivery it settles is
    /// acknowledged and its "delivered" receipt gathered with the next uplink; returns its
    /// offset in the user's stream, for the archive's side.
    mutating func acknowledged(_ sequence: UInt32, now: NIODeadline) -> UInt64? {
        guard let settled = self.deliveryAcknowledged(sequence) else { return nil }
        if let deliveryID = settled.deliveryID { self.uplink.acknowledge(deliveryID) }
        if let origin = settled.origin { self.uplink.delivered(origin, now: now) }
        return settled.offset
    }

    /// A chat message `messageID` at `now`: whether it may go. A refusal pauses reading
    /// (``DeviceRateLimits/admitChat(messageID:now:)``).
    mutating func admitChat(messageID: String, now: NIODeadline) -> DeviceRateLimits.ChatVerdict {
        let verdict = self.rates.admitChat(messageID: messageID, now: now)
        if case .refuse(_, let until) = verdict { self.rateLimited(until: until) }
        return verdict
    }

    /// What goes to the MQTT side now (``Uplink/take(now:flush:)``): only while the session
    /// is open, or `ending` (the last call, as it starts ending, flushes the receipts).
    mutating func takeUplink(now: NIODeadline, flushReceipts: Bool = false, ending: Bool = false) -> Uplink<PendingChat>.Work? {
        guard ending || self.isSessionOpen else { return nil }
        return self.uplink.take(now: now, flush: flushReceipts || ending)
    }

    /// Chat messages not handed to ``ChatAcceptance`` yet.
    var waitingChats: Int { self.uplink.waitingChats }

    /// Whether a held read happens now that the chat messages waiting changed.
    mutating func chatsChanged() -> Bool {
        self.backpressureChanged(waitingChats: self.waitingChats)
    }

    /// The next frame for the device while its socket takes more, with its sequence number;
    /// one the device must ACK is recorded as pending from `now`.
    mutating func nextFrame(now: NIODeadline) -> (Downlink.Entry, sequence: UInt32)? {
        guard self.isLoggedIn, let entry = self.downlink.queue.dequeue() else { return nil }
        let sequence = self.nextSequence()
        if entry.isAwaited {
            self.deliveryWritten(sequence, deliveryID: entry.deliveryID, origin: entry.origin, offset: entry.offset, now: now)
        }
        return (entry, sequence)
    }

    /// Whether the archive's timer (a gap, or a catch-up to try again) is due at `now`;
    /// it is disarmed if so.
    mutating func archiveTimerDue(now: NIODeadline) -> Bool {
        guard self.isLoggedIn, let deadline = self.archive?.deadline, now >= deadline else { return false }
        self.archive?.deadline = nil
        return true
    }

    /// Arms the archive's timer for `now + delay`, unless it is armed.
    mutating func armArchiveTimer(now: NIODeadline, after delay: TimeAmount) {
        guard self.archive != nil, self.archive?.deadline == nil else { return }
        self.archive?.deadline = now + delay
    }
}

/// A one-to-one chat the device sent, checked and waiting for its turn (at most
/// `broker.max_inflight` are handed to ``ChatAcceptance`` and not answered).
struct PendingChat: Sendable {
    var chat: ChatAcceptance.Chat
    var ticket: ConnectionMailbox.ChatTicket
}
