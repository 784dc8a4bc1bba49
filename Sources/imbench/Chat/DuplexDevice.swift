import IMWire
import NIOCore

/// A device that sends one flow and receives another at once (`imbench chat --duplex`):
/// its chat ACKs go to its sender half, its deliveries to its receiver half.
final class DuplexDevice: DeviceBehaviour {
    private let sender: ChatSender
    private let receiver: ChatReceiver

    init(sender: ChatSender, receiver: ChatReceiver) {
        self.sender = sender
        self.receiver = receiver
    }

    func acked(_ frame: IMFrame, context: ChannelHandlerContext) { sender.acked(frame, context: context) }
    func received(_ frame: IMFrame, context: ChannelHandlerContext) {
        // RECEIPT_NOTICEs are about what this device sent.
        if frame.header.type == .readReceipt {
            sender.received(frame, context: context)
        } else {
            receiver.received(frame, context: context)
        }
    }
    func handle(_ event: BenchEvent, context: ChannelHandlerContext) { sender.handle(event, context: context) }
    func closed() { sender.closed() }
}
