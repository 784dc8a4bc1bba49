import Synchronization

/// What happened in a chaos run, recorded as it happens by the devices and the nemesis (from
/// any task), read once at the end: the sends and their outcomes, what each device's app saw,
/// each device's spells offline, the faults' windows and the timeline.
final class ChaosLedger: Sendable {
    private struct State {
        var sends: [ChaosSend] = []
        var index: [String: Int] = [:]
        var arrivals: [[ChaosArrival]]
        /// When each device went offline, while it is.
        var downSince: [Double?]
        var spells: [ChaosRecovery.Spell] = []
        var windows: [ChaosRecovery.Window] = []
        var timeline: [String] = []
        /// Events the checker does not judge but the report shows (kicks, refused logins).
        var notes: [String: Int] = [:]
        var examples: [String] = []
        /// Refusals with a time to retry that the clients sent again by themselves.
        var retried = 0
    }

    private let state: Mutex<State>
    private let start = MonotonicClock.nanoseconds()

    init(devices: Int) {
        state = Mutex(State(arrivals: Array(repeating: [], count: devices), downSince: Array(repeating: nil, count: devices)))
    }

    /// Seconds since the ledger was made (the run's clock).
    var now: Double { Double(MonotonicClock.nanoseconds() - start) / 1e9 }

    // MARK: Sends

    func sending(_ send: ChaosSend) {
        var send = send
        send.sentAt = now
        state.withLock { state in
            state.index[send.messageID] = state.sends.count
            state.sends.append(send)
        }
    }

    func answered(_ messageID: String, _ outcome: ChaosSend.Outcome) {
        let now = now
        state.withLock { state in
            guard let index = state.index[messageID] else { return }
            state.sends[index].outcome = outcome
            state.sends[index].answeredAt = now
        }
    }

    /// Sends not answered yet.
    var pendingSends: Int {
        state.withLock { $0.sends.lazy.filter { $0.outcome == .pending }.count }
    }

    // MARK: Devices

    func arrived(_ arrival: ChaosArrival, at device: Int) {
        var arrival = arrival
        arrival.at = now
        state.withLock { $0.arrivals[device].append(arrival) }
    }

    /// Device `device`'s client lost its connection (or its app was closed).
    func wentDown(_ device: Int) {
        let now = now
        state.withLock { state in
            if state.downSince[device] == nil { state.downSince[device] = now }
        }
    }

    /// Device `device` is logged in again. `since`: the start of the spell when it is not
    /// the moment it went down (an app opened again after the nemesis closed it).
    func cameUp(_ device: Int, since: Double? = nil) {
        let now = now
        state.withLock { state in
            guard let down = state.downSince[device] else { return }
            state.downSince[device] = nil
            state.spells.append(ChaosRecovery.Spell(device: device, down: since ?? down, up: now))
        }
    }

    /// Forgets that `device` is down without a spell (the end of the run).
    func forgetDown(_ device: Int) {
        state.withLock { $0.downSince[device] = nil }
    }

    /// Counts an event of kind `kind`, keeping the first few descriptions.
    func note(_ kind: String, _ text: String) {
        let now = now
        state.withLock { state in
            state.notes[kind, default: 0] += 1
            if state.examples.count < 40 { state.examples.append(String(format: "%7.2f s  %@", now, text)) }
        }
    }

    /// Adds a closed client's count of refusals it retried by itself.
    func retried(_ count: Int) {
        state.withLock { $0.retried += count }
    }

    // MARK: Faults

    func window(_ window: ChaosRecovery.Window) {
        state.withLock { $0.windows.append(window) }
    }

    /// A line of the fault timeline, stamped with the run's clock.
    func log(_ line: String) {
        let stamped = String(format: "%7.2f s  ", now) + line
        Log.info("chaos: " + stamped)
        state.withLock { $0.timeline.append(stamped) }
    }

    // MARK: Reading

    struct Snapshot: Sendable {
        var sends: [ChaosSend]
        var arrivals: [[ChaosArrival]]
        var spells: [ChaosRecovery.Spell]
        var windows: [ChaosRecovery.Window]
        var timeline: [String]
        var notes: [String: Int]
        var examples: [String]
        var retried: Int
    }

    var snapshot: Snapshot {
        state.withLock { state in
            Snapshot(
                sends: state.sends, arrivals: state.arrivals, spells: state.spells, windows: state.windows,
                timeline: state.timeline, notes: state.notes, examples: state.examples, retried: state.retried)
        }
    }

    /// How many messages device N's app has seen.
    func arrivalCount(_ device: Int) -> Int {
        state.withLock { $0.arrivals[device].count }
    }
}
