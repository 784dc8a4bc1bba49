import Synchronization

/// Counters shared by the idle devices of `imbench connect` and its control task.
final class ConnectCounters: Sendable {
    let loggedIn = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    let heartbeatsSent = Atomic<Int>(0)
    let heartbeatAcks = Atomic<Int>(0)
    /// Connections that closed after LOGIN_OK (dropped or kicked by the gateway).
    let closedAfterLogin = Atomic<Int>(0)
}
