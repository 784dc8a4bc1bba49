import IMWire
import NIOCore

/// Writes frames to a device's channel from any thread, with the connection's sequence
/// numbers and session id: what requests answered off the event loop use.
struct FrameSender: Sendable {
    let channel: any Channel
    let sequence: OutboundSequence
    /// The session id of the LOGIN, carried by what the gateway sends on its own.
    var sessionID: UInt16 = 0

    /// An ACK for the request with `header`.
    func reply(_ ack: Ack, to header: IMFrameHeader) {
        channel.writeAndFlush(ack.frame(timestamp: unixSeconds(), sessionID: header.sessionID), promise: nil)
    }

    /// Sends `message`, then closes the channel.
    func sendAndClose(_ message: IMMessage) {
        let frame = message.frame(sequence: sequence.next(), timestamp: unixSeconds(), sessionID: sessionID)
        let channel = self.channel
        channel.writeAndFlush(frame).whenComplete { _ in channel.close(promise: nil) }
    }
}
