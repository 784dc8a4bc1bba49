import ArgumentParser

/// What a network outage of `imbench weak` does to the connections open when it begins
/// (new connections are refused during every outage, as a connect without a network fails).
enum OutageMode: String, Sendable, CaseIterable, ExpressibleByArgument {
    /// `FaultProxy.holdAll(_:)`: silence both ways, and what was sent meanwhile
    /// is delivered intact once the network is back, as when a phone regains coverage on the
    /// same network: a connection survives unless its heartbeat gave up meanwhile.
    case hold
    /// `FaultProxy.blackholeAll()`: silence for good, as when the phone comes
    /// back on another network (a new address): every connection open at the start is dead
    /// and has to be found dead and replaced.
    case blackhole
}
