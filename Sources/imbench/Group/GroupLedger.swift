import Histogram
import Synchronization

/// The accounting of one group phase: one sender's messages, each delivered to every member
/// who is online (receivers `0..<online`) and queued for every member who is offline
/// (receivers `online..<online + offline`, counted when they log in again after the phase:
/// ``offlineCounts()``).
///
/// A message holds one of the sender's window slots until it is ACKed (by the gateway, or by
/// the broker for every publish it took) and received by every online member, so that the
/// sender cannot outrun the slowest member. Latency is measured per delivery to an online
/// member. Lost: a delivery an online member never got of a message that was ACKed.
///
/// The sender's and receivers' `pair` arguments (``ChatAccounting``) are ignored on the
/// sending side and name the member on the receiving side.
final class GroupLedger: ChatAccounting, PhaseAccounting {
    /// What the offline members got once back.
    struct OfflineCounts: Sendable {
        /// ACKed messages × offline members.
        var expected = 0
        /// First copies received.
        var received = 0
        var duplicates = 0
        /// Deliveries that arrived out of the order they were sent in.
        var outOfOrder = 0
    }

    private struct State {
        var sent = 0
        var acked = Bitset()
        var ackedCount = 0
        var refused = 0
        var receiptNotices = 0
        /// Online members that received message `sequence` (index `sequence`).
        var receivers: [Int32] = []
        /// Per member (online, then offline): the sequences it received.
        var members: [Bitset]
        /// Per offline member: the last sequence received.
        var offlineLast: [Int]
        var delivered = 0
        var duplicates = 0
        var offline = OfflineCounts()
        var histogram = Histogram<UInt64>(
            lowestDiscernibleValue: 1, highestTrackableValue: 120_000_000, numberOfSignificantValueDigits: .three)
        var firstError: String?
    }

    /// Members that are logged in during the phase.
    let online: Int
    /// Members that are not (their messages are queued by the broker).
    let offline: Int
    private let state: Mutex<State>

    init(online: Int, offline: Int) {
        self.online = online
        self.offline = offline
        state = Mutex(
            State(members: Array(repeating: Bitset(), count: online + offline), offlineLast: Array(repeating: 0, count: offline)))
    }

    func sent(pair: Int) {
        state.withLock { state in
            state.sent += 1
            if state.receivers.count <= state.sent { state.receivers.append(contentsOf: repeatElement(0, count: max(1024, state.receivers.count))) }
        }
    }

    func acked(pair: Int, sequence: Int) -> Bool {
        state.withLock { state in
            if state.acked.insert(sequence) { state.ackedCount += 1 }
            return Int(state.receivers[sequence]) == online
        }
    }

    func refused(pair: Int, reason: String) {
        state.withLock { state in
            state.refused += 1
            if state.firstError == nil { state.firstError = reason }
        }
    }

    func receiptNotice(pair: Int) {
        state.withLock { $0.receiptNotices += 1 }
    }

    func received(pair member: Int, sequence: Int, sentAt: UInt64, now: UInt64) -> Bool {
        let micros = now > sentAt ? (now - sentAt) / 1000 : 0
        return state.withLock { state in
            guard member >= 0, member < online + offline, sequence >= 1, sequence < state.receivers.count else { return false }
            guard state.members[member].insert(sequence) else {
                if member < online { state.duplicates += 1 } else { state.offline.duplicates += 1 }
                return false
            }
            if member >= online {
                let index = member - online
                if sequence < state.offlineLast[index] { state.offline.outOfOrder += 1 }
                state.offlineLast[index] = sequence
                state.offline.received += 1
                return false
            }
            state.delivered += 1
            state.receivers[sequence] += 1
            _ = state.histogram.record(Swift.max(1, Swift.min(micros, 120_000_000)))
            return Int(state.receivers[sequence]) == online && state.acked.contains(sequence)
        }
    }

    func totals() -> ChatLedger.Totals {
        state.withLock { state in
            var totals = ChatLedger.Totals()
            totals.sent = state.sent
            totals.acked = state.ackedCount
            totals.refused = state.refused
            totals.received = state.delivered
            totals.duplicates = state.duplicates
            totals.receiptNotices = state.receiptNotices
            totals.p99Milliseconds = Double(state.histogram.valueAtPercentile(99)) / 1000
            return totals
        }
    }

    /// Every message ACKed or refused, and every ACKed one received by every online member.
    func isDrained() -> Bool {
        state.withLock { state in
            state.sent == state.ackedCount + state.refused && Self.missing(state, online: online) == 0
        }
    }

    func report() -> ChatLedger.Report {
        let totals = totals()
        return state.withLock { state in
            ChatLedger.Report(
                totals: totals, lost: Self.missing(state, online: online),
                unacknowledged: state.sent - state.ackedCount - state.refused, latencies: state.histogram,
                firstError: state.firstError)
        }
    }

    /// Offline members' counts so far (against the messages ACKed in the phase).
    func offlineCounts() -> OfflineCounts {
        state.withLock { state in
            var counts = state.offline
            counts.expected = state.ackedCount * offline
            return counts
        }
    }

    /// Deliveries to online members that are missing, of ACKed messages.
    private static func missing(_ state: State, online: Int) -> Int {
        guard state.sent > 0 else { return 0 }
        var missing = 0
        for sequence in 1...state.sent where state.acked.contains(sequence) {
            missing += online - Int(state.receivers[sequence])
        }
        return missing
    }
}
