import IMWire
import NIOCore

/// What a benchmark device does once logged in: send chat, receive chat, or idle with
/// heartbeats. Called by ``BenchDeviceHandler`` on the channel's event loop only.
protocol DeviceBehaviour: AnyObject {
    /// LOGIN_OK arrived.
    func loggedIn(_ ok: LoginOK, context: ChannelHandlerContext)
    /// An ACK from the gateway (of a CHAT or a HEARTBEAT).
    func acked(_ frame: IMFrame, context: ChannelHandlerContext)
    /// A DATA or READ_RECEIPT frame from the gateway; the handler has already queued its ACK.
    func received(_ frame: IMFrame, context: ChannelHandlerContext)
    /// A ``BenchEvent`` sent to the channel.
    func handle(_ event: BenchEvent, context: ChannelHandlerContext)
    /// The connection closed (after login).
    func closed()
}

extension DeviceBehaviour {
    func loggedIn(_ ok: LoginOK, context: ChannelHandlerContext) {}
    func acked(_ frame: IMFrame, context: ChannelHandlerContext) {}
    func received(_ frame: IMFrame, context: ChannelHandlerContext) {}
    func handle(_ event: BenchEvent, context: ChannelHandlerContext) {}
    func closed() {}
}
