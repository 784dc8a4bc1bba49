/// How long devices took to be back after the faults that took them away. Pure: the devices'
/// offline spells and the faults' windows in, one figure per spell out.
///
/// A spell runs from the moment a device's client lost its connection to the moment it was
/// logged in again. It is measured from the later of its start and the last end of a fault
/// (one of the whole cluster, or one of this device's link) that ended within it: a device
/// that lost its gateway while the broker was also down is measured from the broker's return.
/// A spell of an app closed by the nemesis starts when the app opens again.
enum ChaosRecovery {
    /// One device's time offline.
    struct Spell: Sendable, Hashable {
        var device: Int
        /// Seconds from the run's start.
        var down: Double
        var up: Double
    }

    /// A fault's time in the run: from its start until everything it did was undone (the
    /// process accepts connections again, the link passes).
    struct Window: Sendable, Hashable {
        var start: Double
        var end: Double
        /// The one device it concerns, or nil for the cluster.
        var device: Int?
        var fault: String
    }

    struct Back: Sendable, Hashable {
        var device: Int
        /// Seconds from the later of the spell's start and the last recovery within it.
        var seconds: Double
        /// When the device was back, seconds from the run's start.
        var at: Double
        /// The fault whose end the time is measured from, if any.
        var after: String?
    }

    static func backTimes(_ spells: [Spell], _ windows: [Window]) -> [Back] {
        spells.map { spell in
            var from = spell.down
            var after: String?
            for window in windows where window.device == nil || window.device == spell.device {
                if window.end > from, window.end <= spell.up {
                    from = window.end
                    after = window.fault
                }
            }
            return Back(device: spell.device, seconds: spell.up - from, at: spell.up, after: after)
        }
    }
}
