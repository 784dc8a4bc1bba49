import Histogram
import Synchronization

/// The accounting of one chat phase (gateway or direct): per pair what was sent, ACKed by
/// the gateway or broker, refused, and received; latency (receive − send) in an
/// HdrHistogram; duplicates; and, after the drain, loss: messages ACKed to the sender and
/// never received.
///
/// It also keeps the window end to end: a message holds its sender's window slot until it
/// is both ACKed (by the gateway or broker) and received. The ACK alone comes from the
/// broker, not from the receiver, so a window of ACKs lets a sender outrun its receiver and
/// the broker's queue (and the latency) grow without bound.
///
/// Shared by senders and receivers (a lock, uncontended: each phase's clients run on one
/// thread).
final class ChatLedger: Sendable {
    /// Running counts, for the progress line.
    struct Totals: Sendable {
        var sent = 0
        var acked = 0
        var refused = 0
        var received = 0
        var duplicates = 0
        /// RECEIPT_NOTICE frames the senders got (gateway path).
        var receiptNotices = 0
        var p99Milliseconds = 0.0
    }

    /// The final figures of a phase (or of several rounds of one path, see ``combining(_:)``).
    struct Report: Sendable {
        var totals: Totals
        /// ACKed, never received.
        var lost: Int
        /// Sent, neither ACKed nor refused (publish failed, or still in flight at the end).
        var unacknowledged: Int
        /// The latency of every first copy received, microseconds (the source of the
        /// percentiles below; kept so that rounds can be merged).
        var latencies: Histogram<UInt64>
        /// Latency percentiles and extremes, milliseconds.
        var p50: Double
        var p90: Double
        var p99: Double
        var p999: Double
        var max: Double
        var mean: Double
        /// The first refusal or failure seen, if any.
        var firstError: String?

        /// Figures whose latency percentiles and extremes are those of `latencies`.
        init(totals: Totals, lost: Int, unacknowledged: Int, latencies: Histogram<UInt64>, firstError: String?) {
            func ms(_ percentile: Double) -> Double { Double(latencies.valueAtPercentile(percentile)) / 1000 }
            self.totals = totals
            self.lost = lost
            self.unacknowledged = unacknowledged
            self.latencies = latencies
            p50 = ms(50)
            p90 = ms(90)
            p99 = ms(99)
            p999 = ms(99.9)
            max = Double(latencies.max) / 1000
            mean = latencies.mean / 1000
            self.firstError = firstError
        }

        /// The figures of several phases of the same path as one: counts summed, latency
        /// over all their samples (the histograms merged, which is exact: they share one
        /// bucket layout), the first error of the earliest phase that had one. Nil for none.
        static func combining(_ reports: [Report]) -> Report? {
            guard var latencies = reports.first?.latencies else { return nil }
            for report in reports.dropFirst() { latencies.add(report.latencies) }
            var totals = Totals()
            for report in reports {
                totals.sent += report.totals.sent
                totals.acked += report.totals.acked
                totals.refused += report.totals.refused
                totals.received += report.totals.received
                totals.duplicates += report.totals.duplicates
                totals.receiptNotices += report.totals.receiptNotices
            }
            totals.p99Milliseconds = Double(latencies.valueAtPercentile(99)) / 1000
            return Report(
                totals: totals, lost: reports.reduce(0) { $0 + $1.lost },
                unacknowledged: reports.reduce(0) { $0 + $1.unacknowledged }, latencies: latencies,
                firstError: reports.lazy.compactMap(\.firstError).first)
        }
    }

    private struct Pair {
        var sent = 0
        var acked = Bitset()
        var ackedCount = 0
        var refused = 0
        var received = Bitset()
        var receivedCount = 0
        var duplicates = 0
        var receiptNotices = 0
    }

    private struct State {
        var pairs: [Pair]
        /// Direct-path publishers waiting for a message to arrive: pair << 32 | sequence.
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var histogram = Histogram<UInt64>(
            lowestDiscernibleValue: 1, highestTrackableValue: 120_000_000, numberOfSignificantValueDigits: .three)
        var firstError: String?
        var waitersReleased = false
    }

    private let state: Mutex<State>

    init(pairs: Int) {
        state = Mutex(State(pairs: Array(repeating: Pair(), count: pairs)))
    }

    /// A message of `pair` left the sender.
    func sent(pair: Int) {
        state.withLock { $0.pairs[pair].sent += 1 }
    }

    /// The gateway (or broker) accepted message `sequence` of `pair`. Returns true when the
    /// message was received already (it no longer holds a window slot).
    @discardableResult
    func acked(pair: Int, sequence: Int) -> Bool {
        state.withLock { state in
            if state.pairs[pair].acked.insert(sequence) { state.pairs[pair].ackedCount += 1 }
            return state.pairs[pair].received.contains(sequence)
        }
    }

    /// Returns once message `sequence` of `pair` was received, or ``releaseWaiters()`` was called.
    func awaitReceipt(pair: Int, sequence: Int) async {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> Bool in
                if state.pairs[pair].received.contains(sequence) || state.waitersReleased { return true }
                state.waiters[pair << 32 | sequence] = continuation
                return false
            }
            if ready { continuation.resume() }
        }
    }

    /// Resumes every ``awaitReceipt(pair:sequence:)`` (messages that will never arrive).
    func releaseWaiters() {
        let waiters = state.withLock { state in
            state.waitersReleased = true
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// The sender of `pair` got a RECEIPT_NOTICE.
    func receiptNotice(pair: Int) {
        state.withLock { $0.pairs[pair].receiptNotices += 1 }
    }

    /// The gateway refused a message of `pair` (negative ACK), or the publish failed.
    func refused(pair: Int, reason: String) {
        state.withLock { state in
            state.pairs[pair].refused += 1
            if state.firstError == nil { state.firstError = reason }
        }
    }

    /// The receiver of `pair` got message `sequence`, sent at `sentAt` (monotonic ns).
    /// Returns true when this first copy completes a message that was ACKed already (its
    /// window slot is free now).
    @discardableResult
    func received(pair: Int, sequence: Int, sentAt: UInt64, now: UInt64) -> Bool {
        let micros = now > sentAt ? (now - sentAt) / 1000 : 0
        let (completes, waiter) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
            guard state.pairs[pair].received.insert(sequence) else {
                state.pairs[pair].duplicates += 1
                return (false, nil)
            }
            state.pairs[pair].receivedCount += 1
            _ = state.histogram.record(Swift.max(1, Swift.min(micros, 120_000_000)))
            let waiter = state.waiters.isEmpty ? nil : state.waiters.removeValue(forKey: pair << 32 | sequence)
            return (state.pairs[pair].acked.contains(sequence), waiter)
        }
        waiter?.resume()
        return completes
    }

    /// Counts so far.
    func totals() -> Totals {
        state.withLock { state in
            var totals = Totals()
            for pair in state.pairs {
                totals.sent += pair.sent
                totals.acked += pair.ackedCount
                totals.refused += pair.refused
                totals.received += pair.receivedCount
                totals.duplicates += pair.duplicates
                totals.receiptNotices += pair.receiptNotices
            }
            totals.p99Milliseconds = Double(state.histogram.valueAtPercentile(99)) / 1000
            return totals
        }
    }

    /// True when every message sent was ACKed or refused, and every ACKed one received.
    func isDrained() -> Bool {
        state.withLock { state in
            state.pairs.allSatisfy { pair in
                pair.sent == pair.ackedCount + pair.refused && pair.acked.countMissing(from: pair.received) == 0
            }
        }
    }

    /// The final figures (call after the drain).
    func report() -> Report {
        let totals = totals()
        return state.withLock { state in
            let lost = state.pairs.reduce(0) { $0 + $1.acked.countMissing(from: $1.received) }
            let unacknowledged = state.pairs.reduce(0) { $0 + $1.sent - $1.ackedCount - $1.refused }
            return Report(
                totals: totals, lost: lost, unacknowledged: unacknowledged, latencies: state.histogram,
                firstError: state.firstError)
        }
    }
}
