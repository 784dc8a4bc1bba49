import IMWire

/// Requests sent and not answered yet, by frame sequence: the ACK deadline and whoever
/// waits for the answer. Pure bookkeeping; the client does the waiting and the I/O.
///
/// A request is inserted *before* its frame is written and the waiter attached after, so an
/// ACK that arrives in between is kept (``settle(_:with:)`` stores it and ``attach(_:to:)``
/// returns it). Each request is settled once: by its ACK, by its deadline
/// (``expire(now:)``), or by the end of the connection (``failAll(with:)``).
struct PendingAcks<Waiter> {
    /// What a request ends with: the (positive or negative) ACK, or why there is none.
    typealias Outcome = Result<Ack, IMClientError>

    private struct Entry {
        var deadline: ContinuousClock.Instant
        var waiter: Waiter?
        var outcome: Outcome?
    }

    private var entries: [UInt32: Entry] = [:]

    init() {}

    /// Whether a request with `sequence` is pending (its number must not be reused).
    func contains(_ sequence: UInt32) -> Bool { entries[sequence] != nil }

    /// How many requests are pending.
    var count: Int { entries.count }

    /// The earliest deadline of a request nobody has settled yet.
    var nextDeadline: ContinuousClock.Instant? {
        entries.values.lazy.filter { $0.outcome == nil }.map(\.deadline).min()
    }

    /// Registers the request `sequence`, to be answered by `deadline`.
    mutating func insert(_ sequence: UInt32, deadline: ContinuousClock.Instant) {
        precondition(entries[sequence] == nil, "sequence \(sequence) is still pending")
        entries[sequence] = Entry(deadline: deadline)
    }

    /// Attaches the waiter of `sequence`. Returns the outcome if the request was already
    /// settled (or is unknown: `.disconnected`), and forgets it; otherwise `nil` and the
    /// waiter is returned by whatever settles it.
    mutating func attach(_ waiter: Waiter, to sequence: UInt32) -> Outcome? {
        guard var entry = entries[sequence] else { return .failure(.disconnected) }
        if let outcome = entry.outcome {
            entries[sequence] = nil
            return outcome
        }
        entry.waiter = waiter
        entries[sequence] = entry
        return nil
    }

    /// Settles `sequence` with `outcome`. Returns its waiter to resume (and forgets the
    /// request) if one is attached; stores the outcome for ``attach(_:to:)`` otherwise.
    /// Unknown sequences (e.g. the ACK of a heartbeat) and requests settled already are
    /// left alone.
    mutating func settle(_ sequence: UInt32, with outcome: Outcome) -> Waiter? {
        guard var entry = entries[sequence], entry.outcome == nil else { return nil }
        if let waiter = entry.waiter {
            entries[sequence] = nil
            return waiter
        }
        entry.outcome = outcome
        entries[sequence] = entry
        return nil
    }

    /// Settles every request whose deadline is at or before `now` with ``IMClientError/timeout``;
    /// returns the waiters to resume with it.
    mutating func expire(now: ContinuousClock.Instant) -> [Waiter] {
        let overdue = entries.filter { $0.value.outcome == nil && $0.value.deadline <= now }.keys.sorted()
        return overdue.compactMap { settle($0, with: .failure(.timeout)) }
    }

    /// Settles every pending request with `error` (the connection ended); returns the
    /// waiters to resume with it.
    mutating func failAll(with error: IMClientError) -> [Waiter] {
        entries.keys.sorted().compactMap { settle($0, with: .failure(error)) }
    }
}
