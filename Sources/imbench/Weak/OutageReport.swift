/// What the network outages of an `imbench weak` run did to the devices, worked out after
/// the run from when each outage began and ended and from each device's `.reconnecting`
/// and `.reconnected` events (as the bench received them).
///
/// Per outage and device, with "until the next outage" meaning before the next outage
/// began, or the end of the run after the last one:
/// - **Has to reconnect**: the device had no connection when the network came back (it lost
///   it during the outage, or lost it before and had not logged in again), or, when
///   connections do not survive outages (``OutageMode/blackhole``), it had one: a dead one.
/// - **Reconnect after the return**: for such a device, the time from the return to its
///   first `.reconnected` after it that follows a loss since the outage began (or any, if
///   it had no connection when the outage began), if that came until the next outage.
/// - **Not reconnected**: such a device without that `.reconnected` until the next outage.
/// - **Survived** (only when connections survive outages, ``OutageMode/hold``): the device
///   was connected when the outage began and when it ended, with no `.reconnecting` in
///   between (its heartbeat did not give up during the silence). A device that lost its
///   connection during the outage and had it back before the network returned (not
///   possible through the proxy's hold) counts in neither.
///
/// **First new connection after the return.** The proxy counts the connections it accepts
/// but cannot tell which device opened one. After an outage that left k devices to
/// reconnect, the first k connections accepted after the return (until the next outage)
/// stand for their first new connections: the same distribution as long as no device opens
/// two of them before another opens its first, and no other device (one cut right after the
/// return) opens one.
struct OutageReport: Sendable {
    /// A device's connection going or coming back, from its `IMClient.events`.
    struct DeviceEvent: Sendable, Hashable {
        enum Kind: Sendable, Hashable {
            /// `.reconnecting`: the connection, or an attempt to reopen it, was lost.
            case lost
            /// `.reconnected`: logged in again.
            case restored
        }

        /// What happened.
        var kind: Kind
        /// When the bench saw it (``MonotonicClock/nanoseconds()``).
        var at: UInt64
    }

    /// One outage as it happened (``MonotonicClock/nanoseconds()``).
    struct Window: Sendable, Hashable {
        /// When the network went away.
        var down: UInt64
        /// When it came back (the proxy forwards again; `networkAvailable()` follows).
        var back: UInt64
    }

    /// One device's events, in the order seen.
    struct Device: Sendable {
        /// A short name for logs ("s0" sender of pair 0, "r0" its receiver).
        var name: String
        /// Its `.reconnecting` and `.reconnected` events.
        var events: [DeviceEvent]
    }

    /// What one outage did.
    struct Outcome: Sendable {
        /// The outage.
        var window: Window
        /// Devices connected through it.
        var survived = 0
        /// Devices that reconnected after the return: name, nanoseconds from the return, and
        /// when it saw the loss that made it reconnect, in nanoseconds from the return
        /// (negative: during the outage; nil: it had no connection when the outage began).
        var reconnects: [(device: String, nanoseconds: UInt64, lost: Int64?)] = []
        /// Devices that had to reconnect and did not until the next outage.
        var notReconnected: [String] = []
        /// Nanoseconds from the return to each of the first connections accepted after it
        /// (one per device that had to reconnect, at most).
        var connects: [UInt64] = []
    }

    /// Every outage's outcome, in order.
    let outcomes: [Outcome]

    /// Works the outcomes out.
    ///
    /// - Parameters:
    ///   - windows: The outages, in order, none overlapping.
    ///   - devices: Every device's events.
    ///   - accepts: When the proxy accepted each connection (in the order seen).
    ///   - connectionsSurvive: Whether a connection open during an outage can work again
    ///     after it (``OutageMode/hold``), or is dead (``OutageMode/blackhole``).
    init(windows: [Window], devices: [Device], accepts: [UInt64], connectionsSurvive: Bool) {
        var outcomes: [Outcome] = []
        for (index, window) in windows.enumerated() {
            let until = index + 1 < windows.count ? windows[index + 1].down : UInt64.max
            var outcome = Outcome(window: window)
            for device in devices {
                let connectedAtDown = Self.isConnected(device.events, before: window.down)
                if !connectionsSurvive || !Self.isConnected(device.events, before: window.back) {
                    var lostSinceDown = !connectedAtDown
                    var firstLoss: UInt64?
                    var back: DeviceEvent?
                    for event in device.events where event.at >= window.down && event.at < until {
                        if event.kind == .lost {
                            lostSinceDown = true
                            if firstLoss == nil { firstLoss = event.at }
                        } else if lostSinceDown, event.at >= window.back {
                            back = event
                            break
                        }
                    }
                    if let back {
                        let lost = firstLoss.map { Int64(bitPattern: $0 &- window.back) }
                        outcome.reconnects.append((device.name, back.at - window.back, lost))
                    } else {
                        outcome.notReconnected.append(device.name)
                    }
                } else if connectedAtDown,
                    !device.events.contains(where: { $0.kind == .lost && $0.at >= window.down && $0.at < window.back })
                {
                    outcome.survived += 1
                }
            }
            let waiting = outcome.reconnects.count + outcome.notReconnected.count
            let after = accepts.filter { $0 >= window.back && $0 < until }.sorted()
            outcome.connects = after.prefix(waiting).map { $0 - window.back }
            outcomes.append(outcome)
        }
        self.outcomes = outcomes
    }

    /// Device-outages that survived.
    var survived: Int { outcomes.reduce(0) { $0 + $1.survived } }
    /// Every reconnect after a return, nanoseconds from the return.
    var reconnectNanoseconds: [UInt64] { outcomes.flatMap { $0.reconnects.map(\.nanoseconds) } }
    /// Device-outages that did not reconnect until the next outage.
    var notReconnected: Int { outcomes.reduce(0) { $0 + $1.notReconnected.count } }
    /// Every first new connection after a return, nanoseconds from the return.
    var connectNanoseconds: [UInt64] { outcomes.flatMap(\.connects) }

    /// The `quantile` (0...1, nearest rank) of `nanoseconds` in milliseconds; nil if empty.
    static func milliseconds(_ nanoseconds: [UInt64], quantile: Double) -> Double? {
        guard !nanoseconds.isEmpty else { return nil }
        let sorted = nanoseconds.sorted()
        let index = min(sorted.count - 1, Int((Double(sorted.count) * quantile).rounded(.up)) - 1)
        return Double(sorted[max(0, index)]) / 1e6
    }

    /// Whether the device was connected just before `instant`: its last event before it was
    /// not a loss (every device starts logged in).
    private static func isConnected(_ events: [DeviceEvent], before instant: UInt64) -> Bool {
        events.last { $0.at < instant }?.kind != .lost
    }
}
