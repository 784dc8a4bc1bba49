/// How a device reaches the gateway: TLV over TCP, or the same frames in WebSocket messages
/// (`listen.websocket`). Everything but the framing is the same; the metrics tell them apart
/// with a `transport` label.
enum DeviceTransport: String, CaseIterable, Sendable {
    case tcp
    case websocket
}
