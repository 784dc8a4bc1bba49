import Synchronization

/// How a device reaches the gateway: TLV over TCP, or the same frames in WebSocket messages
/// (`listen.websocket`). Everything but the framing is the same; the metrics tell them apart
/// with a `transport` label.
enum DeviceTransport: String, CaseIterable, Sendable {
    case tcp
    case websocket
}

/// The counts of one transport's devices (``GatewayStatistics/transport(_:)``), for the
/// metrics' `transport` label: their sums are the gateway's totals.
final class TransportCounters: Sendable {
    /// Open connections, counted until their MQTT session has ended too.
    let connections = Atomic<Int>(0)
    /// Logged-in devices.
    let loggedIn = Atomic<Int>(0)
    /// Logins (LOGIN_OK sent) since start.
    let logins = Atomic<Int>(0)
    /// Chat messages accepted from these devices.
    let messagesIn = Atomic<Int>(0)
    /// Messages written to these devices.
    let messagesOut = Atomic<Int>(0)
}
