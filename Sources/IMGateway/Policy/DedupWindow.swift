import DequeModule
/// Whether a message id was seen before.
public enum DedupDecision: Hashable, Sendable {
    /// Not seen in the window: publish it.
    case new
    /// Accepted before for the same message (same fingerprint): a resend. ACK it again (with
    /// the earlier SERVER_TIME, if it was recorded) and do not publish it twice.
    case duplicate(serverTime: UInt64?)
    /// Accepted before for another message (another fingerprint): the sender reused the id.
    /// Refuse it (MESSAGE_ID_REUSED) and publish nothing.
    case reused
}

/// The message ids each sender had accepted recently, with the ``ChatFingerprint`` of the
/// message each named, to ACK a resent message without publishing it twice
/// (docs/PROTOCOL.md 6.3 and 10: clients resend with the same id) and to refuse an id that
/// comes back naming another message, instead of ACKing that message and losing it.
///
/// Bounded twice: at most ``maxIDsPerSender`` ids per sender (the oldest go first) and ids
/// older than ``maxAge`` seconds are forgotten. Expired ids of one sender go when that sender
/// is next checked; every ``maxAge`` a sweep drops them for all senders, so memory holds no
/// more than the ids recorded in the last two ``maxAge`` periods.
///
/// Time is injected as seconds on any clock that does not run backwards much (a clock stepping
/// back only keeps ids longer).
///
/// ```swift
/// let fingerprint = ChatFingerprint(chat)
/// switch window.check(sender: user, id: chat.messageID, fingerprint: fingerprint, now: now) {
/// case .duplicate(let serverTime): ack(serverTime)       // no second publish
/// case .reused: refuse(.messageIDReused)                  // nor a first one
/// case .new: publish(); window.record(sender: user, id: chat.messageID, fingerprint: fingerprint, serverTime: t, now: now)
/// }
/// ```
public struct DedupWindow: Sendable {
    /// Ids remembered per sender.
    public let maxIDsPerSender: Int
    /// Seconds an id is remembered.
    public let maxAge: Double

    private var senders: [String: SenderWindow] = [:]
    private var lastSweep: Double? = nil

    /// Creates an empty window: by default the last 4096 ids per sender, for 10 minutes.
    public init(maxIDsPerSender: Int = 4096, maxAge: Double = 600) {
        precondition(maxIDsPerSender > 0 && maxAge > 0, "the window must hold something")
        self.maxIDsPerSender = maxIDsPerSender
        self.maxAge = maxAge
    }

    /// Whether `id` from `sender` was recorded within the window, and if so whether for the
    /// message with `fingerprint`. Does not record it: record once the message was really
    /// accepted, so that a failed publish can be retried.
    public mutating func check(sender: String, id: String, fingerprint: ChatFingerprint, now: Double) -> DedupDecision {
        self.sweepIfDue(now: now)
        guard let index = self.senders.index(forKey: sender) else { return .new }
        // Mutated in place (through the dictionary's storage): copying a sender's window out
        // and back would copy its thousands of ids on every message.
        self.senders.values[index].expire(before: now - self.maxAge)
        if self.senders.values[index].isEmpty {
            self.senders.remove(at: index)
            return .new
        }
        guard let earlier = self.senders.values[index].records[id] else { return .new }
        return earlier.fingerprint == fingerprint ? .duplicate(serverTime: earlier.serverTime) : .reused
    }

    /// Remembers that `id` from `sender` was accepted at `now` for the message with
    /// `fingerprint` (with the SERVER_TIME it was given, for ACKs of resends). Recording an id
    /// again keeps the first record.
    public mutating func record(sender: String, id: String, fingerprint: ChatFingerprint, serverTime: UInt64? = nil, now: Double) {
        self.sweepIfDue(now: now)
        let cutoff = now - self.maxAge
        let limit = self.maxIDsPerSender
        // In place, like `check`: no copy of the sender's window per message.
        self.senders[sender, default: SenderWindow()].expire(before: cutoff)
        self.senders[sender, default: SenderWindow()].insert(
            id, Record(fingerprint: fingerprint, serverTime: serverTime), at: now, limit: limit)
    }

    /// Forgets every id older than ``maxAge`` and every sender left without ids.
    public mutating func purge(now: Double) {
        let cutoff = now - self.maxAge
        self.senders = self.senders.compactMapValues { window in
            var window = window
            window.expire(before: cutoff)
            return window.isEmpty ? nil : window
        }
        self.lastSweep = now
    }

    /// Senders with ids in the window.
    public var senderCount: Int { self.senders.count }

    /// Ids in the window, over all senders.
    public var idCount: Int { self.senders.values.reduce(0) { $0 + $1.count } }

    private mutating func sweepIfDue(now: Double) {
        guard let lastSweep else {
            self.lastSweep = now
            return
        }
        if now - lastSweep >= self.maxAge { self.purge(now: now) }
    }
}

/// What an accepted id named.
private struct Record: Sendable {
    var fingerprint: ChatFingerprint
    var serverTime: UInt64?
}

/// One sender's ids, oldest first.
private struct SenderWindow: Sendable {
    var order = Deque<(id: String, recordedAt: Double)>()
    var records: [String: Record] = [:]

    var isEmpty: Bool { self.order.isEmpty }
    var count: Int { self.order.count }

    mutating func insert(_ id: String, _ record: Record, at now: Double, limit: Int) {
        guard self.records[id] == nil else { return }
        self.records[id] = record
        self.order.append((id, now))
        while self.order.count > limit, let oldest = self.order.popFirst() {
            self.records[oldest.id] = nil
        }
    }

    mutating func expire(before cutoff: Double) {
        while let oldest = self.order.first, oldest.recordedAt <= cutoff {
            _ = self.order.popFirst()
            self.records[oldest.id] = nil
        }
    }
}
