/// When the whole network goes away during `imbench weak`, and for how long.
///
/// The sending time is cut into slots of 60 / `perMinute` seconds and each slot gets one
/// outage, with a duration drawn uniformly from `duration` and a start drawn uniformly among
/// those that end it inside the slot (so outages never overlap, and the network is back
/// before the faults stop). A slot too short for its outage (the last one, cut short by the
/// end of the sending time) gets none; a run shorter than one slot still gets one outage if
/// it fits.
struct OutageSchedule: Sendable, Hashable {
    /// One outage, as offsets from the moment the faults start.
    struct Outage: Sendable, Hashable {
        /// When the network goes away.
        var start: Duration
        /// How long it stays away.
        var duration: Duration

        /// When the network comes back.
        var end: Duration { start + duration }
    }

    /// The outages, in order.
    let outages: [Outage]

    /// Draws the outages of `seconds` of sending at `perMinute` outages a minute (0 or less:
    /// none), each lasting a number of seconds drawn from `duration`.
    ///
    /// - Parameters:
    ///   - seconds: How long the faults run.
    ///   - perMinute: Outages per minute: one per slot of 60 / `perMinute` seconds.
    ///   - duration: The range of an outage's length, in seconds (negative bounds count as 0).
    ///   - generator: The randomness (seeded for a reproducible schedule).
    init(seconds: Double, perMinute: Double, duration: ClosedRange<Double>, using generator: inout some RandomNumberGenerator) {
        guard perMinute.isFinite, perMinute > 0, seconds.isFinite, seconds > 0 else {
            outages = []
            return
        }
        let slot = 60 / perMinute
        let shortest = max(0, duration.lowerBound)
        let longest = max(shortest, duration.upperBound)
        var outages: [Outage] = []
        var slotStart = 0.0
        while slotStart < seconds {
            let slotEnd = min(slotStart + slot, seconds)
            let length = Double.random(in: shortest ... longest, using: &generator)
            let latestStart = slotEnd - length
            if latestStart >= slotStart {
                let start = Double.random(in: slotStart ... latestStart, using: &generator)
                outages.append(Outage(start: .seconds(start), duration: .seconds(length)))
            }
            slotStart += slot
        }
        self.outages = outages
    }
}
