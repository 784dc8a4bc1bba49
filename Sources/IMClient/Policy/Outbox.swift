import DequeModule

/// The messages this client must get ACKed: queued, in flight, retransmitted when their ACK
/// is overdue, and kept across reconnects (PROTOCOL.md section 10). Pure bookkeeping; the
/// client writes the frames, keeps the time and talks to the ``OutboxStore``.
///
/// **Send order.** By ``OutboxPriority`` (chat, receipt, presence, location, pubsub), and
/// by id (enqueue order) within a priority. An entry that goes back to its queue (ACK
/// overdue, connection lost) returns to its place in that order: ahead of newer entries, in
/// its original order among the others put back.
///
/// **Window.** At most `maxInFlight` entries are written and waiting for their ACK;
/// ``nextToSend()`` offers no more than the room left.
///
/// **Retransmission.** An entry whose ACK is overdue goes back to its queue with
/// ``OutboxEntry/resend`` set and is written again. When one entry's ACK was overdue
/// `maxRetransmits + 1` times on the same connection (written once and retransmitted
/// `maxRetransmits` times without an answer) ``expire(now:)`` reports the connection
/// broken; the entry stays queued for the next connection.
///
/// ```swift
/// let (id, replaced) = outbox.enqueue(.chat(chat), priority: .chat, durable: true)
/// for entry in outbox.nextToSend() {
///     let sequence = sequences.next(skipping: outbox.isInFlight(sequence:))
///     write(entry.messageToWrite, sequence: sequence)
///     outbox.markSent(entry.id, sequence: sequence, deadline: now + ackTimeout)
/// }
/// // on ACK: outbox.acknowledge(sequence:); on timer: outbox.expire(now:)
/// ```
public struct Outbox: Sendable {
    /// What ``Outbox/expire(now:)`` found.
    public struct ExpiryResult: Sendable, Hashable {
        /// The entries whose ACK was overdue, now queued again (with RESEND), in id order.
        public var retransmit: [OutboxEntry.ID]
        /// Whether one of them was retransmitted `maxRetransmits` times on this connection
        /// without an ACK: reconnect (call ``Outbox/connectionLost()``).
        public var connectionBroken: Bool

        /// Creates a result.
        public init(retransmit: [OutboxEntry.ID] = [], connectionBroken: Bool = false) {
            self.retransmit = retransmit
            self.connectionBroken = connectionBroken
        }
    }

    private struct InFlight: Sendable {
        var id: OutboxEntry.ID
        var deadline: ContinuousClock.Instant
    }

    /// How many entries may be written and unanswered at once.
    public let maxInFlight: Int
    /// How many times an entry is retransmitted on one connection before the connection is
    /// considered broken.
    public let maxRetransmits: Int

    private var stored: [OutboxEntry.ID: OutboxEntry] = [:]
    /// Queued ids per priority (index: raw value), ascending.
    private var queues = [Deque<OutboxEntry.ID>](repeating: [], count: OutboxPriority.allCases.count)
    private var inFlight: [UInt32: InFlight] = [:]
    private var sequenceOf: [OutboxEntry.ID: UInt32] = [:]
    /// Overdue ACKs per entry on the current connection.
    private var overdue: [OutboxEntry.ID: Int] = [:]
    private var nextID: OutboxEntry.ID = 1

    /// An empty outbox. `maxInFlight` ≥ 1, `maxRetransmits` ≥ 0.
    public init(maxInFlight: Int = 64, maxRetransmits: Int = 3) {
        precondition(maxInFlight >= 1, "maxInFlight must be at least 1")
        precondition(maxRetransmits >= 0, "maxRetransmits must not be negative")
        self.maxInFlight = maxInFlight
        self.maxRetransmits = maxRetransmits
    }

    /// Entries queued or in flight.
    public var count: Int { stored.count }
    /// Whether there are none.
    public var isEmpty: Bool { stored.isEmpty }
    /// Entries written and waiting for their ACK.
    public var inFlightCount: Int { inFlight.count }
    /// Entries waiting to be written.
    public var queuedCount: Int { stored.count - inFlight.count }
    /// Whether an entry of `priority` has been written and waits for its ACK.
    public func hasInFlight(_ priority: OutboxPriority) -> Bool {
        inFlight.values.contains { stored[$0.id]?.priority == priority }
    }

    /// The entry with `id`, queued or in flight.
    public func entry(_ id: OutboxEntry.ID) -> OutboxEntry? { stored[id] }

    /// Whether the entry `id` is in flight (written, ACK not yet in).
    public func isInFlight(entry id: OutboxEntry.ID) -> Bool { sequenceOf[id] != nil }

    /// Adds a message at the end of its priority's queue. With a `coalescingKey`, queued
    /// entries with the same key (not those in flight) are removed first.
    /// - Returns: the new entry's id, and the ids of the entries it replaced (their senders
    ///   are told they were superseded), in id order.
    public mutating func enqueue(
        _ message: IMMessage,
        priority: OutboxPriority,
        durable: Bool,
        coalescingKey: String? = nil
    ) -> (id: OutboxEntry.ID, replaced: [OutboxEntry.ID]) {
        var replaced: [OutboxEntry.ID] = []
        if let coalescingKey {
            replaced = stored.values
                .filter { $0.coalescingKey == coalescingKey && sequenceOf[$0.id] == nil }
                .map(\.id)
                .sorted()
            for id in replaced { _ = cancel(id) }
        }
        let id = nextID
        nextID += 1
        stored[id] = OutboxEntry(
            id: id, message: message, priority: priority, durable: durable, coalescingKey: coalescingKey)
        queues[priority.rawValue].append(id)  // the largest id so far: the queue stays sorted
        return (id, replaced)
    }

    /// Restores entries loaded from a store (after an app restart): queued in their place,
    /// with ``OutboxEntry/resend`` set, ids kept; later enqueues get larger ids. Entries whose
    /// id is already in the outbox are ignored.
    public mutating func restore(_ entries: [OutboxEntry]) {
        for var entry in entries where stored[entry.id] == nil {
            precondition(entry.id < .max, "outbox entry id out of range")
            entry.resend = true
            stored[entry.id] = entry
            requeue(entry.id, priority: entry.priority)
            nextID = max(nextID, entry.id + 1)
        }
    }

    /// The entries to write now: queued ones in send order, no more than the window has
    /// room for, none of a `paused` priority. They stay queued until
    /// ``markSent(_:sequence:deadline:)``, so calling this again before that returns them again.
    public mutating func nextToSend(paused: Set<OutboxPriority> = []) -> [OutboxEntry] {
        let room = maxInFlight - inFlight.count
        guard room > 0 else { return [] }
        var result: [OutboxEntry] = []
        result.reserveCapacity(min(room, queuedCount))
        for (index, queue) in queues.enumerated() {
            if !paused.isEmpty, let priority = OutboxPriority(rawValue: index), paused.contains(priority) { continue }
            for id in queue {
                guard result.count < room else { return result }
                result.append(stored[id]!)
            }
        }
        return result
    }

    /// The entry `id` was written with `sequence`; its ACK is due by `deadline`.
    /// ``OutboxEntry/attempts`` grows by one. An unknown id (cancelled meanwhile) is ignored;
    /// an entry already in flight moves to the new sequence.
    /// - Precondition: `sequence` is not in flight for another entry.
    public mutating func markSent(_ id: OutboxEntry.ID, sequence: UInt32, deadline: ContinuousClock.Instant) {
        guard var entry = stored[id] else { return }
        precondition(inFlight[sequence].map { $0.id == id } ?? true, "sequence \(sequence) is in flight")
        if let previous = sequenceOf[id] {
            inFlight[previous] = nil
        } else {
            dequeue(id, priority: entry.priority)
        }
        entry.attempts += 1
        stored[id] = entry
        inFlight[sequence] = InFlight(id: id, deadline: deadline)
        sequenceOf[id] = sequence
    }

    /// An ACK (positive or negative) for `sequence`: removes and returns the entry in
    /// flight with that sequence; `nil` if there is none (the ACK of a heartbeat, a late
    /// ACK of an entry already put back).
    public mutating func acknowledge(sequence: UInt32) -> OutboxEntry? {
        guard let flight = inFlight.removeValue(forKey: sequence) else { return nil }
        sequenceOf[flight.id] = nil
        overdue[flight.id] = nil
        return stored.removeValue(forKey: flight.id)
    }

    /// Whether `sequence` is in flight (the driver must not reuse it).
    public func isInFlight(sequence: UInt32) -> Bool {
        inFlight[sequence] != nil
    }

    /// Puts the entries whose ACK is overdue at `now` (deadline ≤ `now`) back in their
    /// queues, in their place, with ``OutboxEntry/resend`` set. Reports the connection
    /// broken when one of them has now been overdue `maxRetransmits + 1` times on this
    /// connection; it stays queued (for the next connection).
    public mutating func expire(now: ContinuousClock.Instant) -> ExpiryResult {
        let due = inFlight.filter { $0.value.deadline <= now }.sorted { $0.value.id < $1.value.id }
        var result = ExpiryResult()
        for (sequence, flight) in due {
            inFlight[sequence] = nil
            sequenceOf[flight.id] = nil
            stored[flight.id]!.resend = true
            requeue(flight.id, priority: stored[flight.id]!.priority)
            overdue[flight.id, default: 0] += 1
            if overdue[flight.id]! > maxRetransmits { result.connectionBroken = true }
            result.retransmit.append(flight.id)
        }
        return result
    }

    /// The earliest ACK deadline of the entries in flight.
    public var nextDeadline: ContinuousClock.Instant? {
        inFlight.values.lazy.map(\.deadline).min()
    }

    /// The connection was lost: durable entries in flight go back to their queues, in their
    /// place, with ``OutboxEntry/resend`` set; non-durable entries, queued or in flight, are
    /// removed. The per-connection retransmit counts start over.
    /// - Returns: the removed entries (their senders get `.disconnected`), in send order.
    public mutating func connectionLost() -> [OutboxEntry] {
        for flight in inFlight.values where stored[flight.id]!.durable {
            stored[flight.id]!.resend = true
            requeue(flight.id, priority: stored[flight.id]!.priority)
        }
        let dropped = Self.sendOrder(stored.values.filter { !$0.durable })
        for entry in dropped where sequenceOf[entry.id] == nil {
            dequeue(entry.id, priority: entry.priority)
        }
        for entry in dropped { stored[entry.id] = nil }
        inFlight = [:]
        sequenceOf = [:]
        overdue = [:]
        return dropped
    }

    /// Removes the entry `id` wherever it is (its sender gave up) and returns it; `nil` if
    /// there is no such entry. A late ACK for it is then ignored.
    public mutating func cancel(_ id: OutboxEntry.ID) -> OutboxEntry? {
        guard let entry = stored.removeValue(forKey: id) else { return nil }
        if let sequence = sequenceOf.removeValue(forKey: id) {
            inFlight[sequence] = nil
        } else {
            dequeue(id, priority: entry.priority)
        }
        overdue[id] = nil
        return entry
    }

    /// Every entry, in flight or queued, in send order (priority, then id): the order in
    /// which a new connection would write them. For stores and inspection.
    public var entries: [OutboxEntry] {
        Self.sendOrder(stored.values)
    }

    private static func sendOrder(_ entries: some Sequence<OutboxEntry>) -> [OutboxEntry] {
        entries.sorted { ($0.priority.rawValue, $0.id) < ($1.priority.rawValue, $1.id) }
    }

    /// Inserts `id` into its queue, keeping the queue sorted.
    private mutating func requeue(_ id: OutboxEntry.ID, priority: OutboxPriority) {
        let queue = queues[priority.rawValue]
        var low = queue.startIndex
        var high = queue.endIndex
        while low < high {
            let middle = (low + high) / 2
            if queue[middle] < id { low = middle + 1 } else { high = middle }
        }
        queues[priority.rawValue].insert(id, at: low)
    }

    /// Removes `id` from its queue.
    private mutating func dequeue(_ id: OutboxEntry.ID, priority: OutboxPriority) {
        if let index = queues[priority.rawValue].firstIndex(of: id) {
            queues[priority.rawValue].remove(at: index)
        }
    }
}
