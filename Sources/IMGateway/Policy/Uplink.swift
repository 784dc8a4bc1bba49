import DequeModule
import NIOCore

/// What a logged-in connection gathers for the MQTT side between visits to its loop, and
/// when it goes: chat messages waiting (in order, at most `maxInFlight` handed over and not
/// settled), acknowledgements of deliveries the device is done with, "delivered" receipts
/// (held for ``receiptWindow`` unless ``receiptBatch`` wait), and answers to presence probes
/// (at most ``probeBatch`` per visit). A pure part of ``ConnectionStateMachine``: `Chat` is
/// whatever the handler publishes.
struct Uplink<Chat> {
    /// What one visit to the MQTT loop carries.
    struct Work {
        /// MQTT deliveries to acknowledge, first (under ack-through they release writes).
        var acknowledgements: [UInt64]
        /// Chat deliveries the device ACKed whose "delivered" receipts go now.
        var receipts: [PendingDeliveries.Origin]
        /// Chat messages to publish, in order.
        var chats: [Chat]
        /// Presence probes to answer.
        var probes: [PresenceProbePayload]
    }

    /// How long "delivered" receipts are gathered before they are published (one MQTT
    /// message per sender for all of them), unless ``receiptBatch`` are waiting first. A
    /// receipt is not urgent, and one per read burst of a busy device costs a fifth of the
    /// gateway's CPU; but a large batch arrives at the sender's connection as one burst of
    /// work that delays its chat ACKs.
    static var receiptWindow: TimeAmount { .milliseconds(10) }
    static var receiptBatch: Int { 64 }
    /// The most probes answered per visit: a flood of probes costs the broker no more than
    /// this many answers per mailbox batch.
    static var probeBatch: Int { 64 }

    /// The most chat messages handed to the MQTT client and not settled (`broker.max_inflight`:
    /// libmosquitto searches its in-flight list linearly).
    let maxInFlight: Int
    /// Chats in order; one not `ready` (a group chat whose members are being looked up) holds
    /// back those behind it.
    private var waiting = Deque<(chat: Chat, ready: Bool)>()
    private(set) var inFlight = 0
    private var acknowledgements: [UInt64] = []
    private var delivered: [PendingDeliveries.Origin] = []
    private var probes: [PresenceProbePayload] = []
    /// When the gathered receipts are due, while some wait.
    private(set) var receiptDeadline: NIODeadline?

    init(maxInFlight: Int) {
        self.maxInFlight = max(1, maxInFlight)
    }

    /// Chat messages accepted and not handed to the MQTT client yet.
    var waitingChats: Int { self.waiting.count }

    /// Whether receipts wait (a read receipt goes after them).
    var hasReceipts: Bool { !self.delivered.isEmpty }

    /// Queues a chat message to publish; one not `ready` goes, with those behind it, once
    /// ``resolve(_:)`` makes it ready.
    mutating func enqueue(_ chat: Chat, ready: Bool = true) { self.waiting.append((chat, ready)) }

    /// Every chat that is ready (at the front), whatever the in-flight bound: the session has
    /// ended, and they are handed over all the same.
    mutating func takeReady() -> [Chat] {
        let chats = popChats(Int.max)
        inFlight += chats.count
        return chats
    }

    /// For each chat not ready, `body` says what becomes of it: `nil` leaves it waiting,
    /// `.some(chat)` makes it ready as `chat`, `.some(nil)` drops it. Returns the chats dropped.
    mutating func resolve(_ body: (Chat) -> Chat??) -> [Chat] {
        var dropped: [Chat] = []
        var kept = Deque<(chat: Chat, ready: Bool)>()
        for entry in self.waiting {
            guard !entry.ready, let outcome = body(entry.chat) else {
                kept.append(entry)
                continue
            }
            if let chat = outcome { kept.append((chat, true)) } else { dropped.append(entry.chat) }
        }
        self.waiting = kept
        return dropped
    }

    /// The MQTT delivery `id` is done with.
    mutating func acknowledge(_ id: UInt64) { self.acknowledgements.append(id) }

    /// A chat delivery the device ACKed: its "delivered" receipt is due within the window.
    mutating func delivered(_ origin: PendingDeliveries.Origin, now: NIODeadline) {
        self.delivered.append(origin)
        if self.receiptDeadline == nil { self.receiptDeadline = now + Self.receiptWindow }
    }

    /// A presence probe from another device, to answer with the next visit: false when it
    /// is already among them or the batch is full.
    mutating func probe(_ probe: PresenceProbePayload) -> Bool {
        guard self.probes.count < Self.probeBatch, !self.probes.contains(probe) else { return false }
        self.probes.append(probe)
        return true
    }

    /// A chat handed over was settled (published or refused).
    mutating func settled() { self.inFlight = max(0, self.inFlight - 1) }

    /// What goes to the MQTT loop now, `nil` when nothing does: every acknowledgement and
    /// probe, the receipts once their window passed (or they fill a batch, or `flush`), and
    /// as many chat messages as the in-flight bound lets go (every ready one, when `ending`:
    /// the session ends, and they are handed over all the same).
    mutating func take(now: NIODeadline, flush: Bool = false, ending: Bool = false) -> Work? {
        let receiptsNow = !self.delivered.isEmpty
            && (flush || ending || self.delivered.count >= Self.receiptBatch || self.receiptDeadline.map { now >= $0 } == true)
        let room = ending ? Int.max : self.maxInFlight - self.inFlight
        let chats = room > 0 ? self.popChats(room) : []
        guard !(chats.isEmpty && self.acknowledgements.isEmpty && !receiptsNow && self.probes.isEmpty) else { return nil }
        var work = Work(acknowledgements: self.acknowledgements, receipts: [], chats: chats, probes: self.probes)
        self.acknowledgements = []
        self.probes = []
        if receiptsNow {
            work.receipts = self.delivered
            self.delivered = []
            self.receiptDeadline = nil
        }
        self.inFlight += chats.count
        return work
    }

    private mutating func popChats(_ room: Int) -> [Chat] {
        guard !self.waiting.isEmpty else { return [] }
        var chats: [Chat] = []
        chats.reserveCapacity(Swift.min(room, self.waiting.count))
        while chats.count < room, self.waiting.first?.ready == true, let entry = self.waiting.popFirst() { chats.append(entry.chat) }
        // An idle connection keeps no storage of its busiest moment.
        if self.waiting.isEmpty { self.waiting = Deque() }
        return chats
    }
}

extension Uplink: Sendable where Chat: Sendable {}
extension Uplink.Work: Sendable where Chat: Sendable {}
extension Uplink.Work: Equatable where Chat: Equatable {}
