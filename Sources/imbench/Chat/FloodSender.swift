import IMWire
import NIOCore
import Synchronization

/// A hostile device for `imbench chat --flooders N`: once started it keeps `window` CHAT
/// frames unanswered, writing a new one for every ACK, and ignores RATE_LIMITED and its
/// RETRY_AFTER. Its messages go to a user nobody is logged in as. It measures nothing itself;
/// ``FloodCounts`` says how much the gateway took and refused.
final class FloodSender: DeviceBehaviour {
    private let recipient: String
    private let counts: FloodCounts
    private let window: Int
    private var running = false
    private var inflight = 0
    private var next = 0
    private let prefix: String

    init(recipient: String, counts: FloodCounts, window: Int = 256, prefix: String) {
        self.recipient = recipient
        self.counts = counts
        self.window = window
        self.prefix = prefix
    }

    func handle(_ event: BenchEvent, context: ChannelHandlerContext) {
        switch event {
        case .start:
            running = true
            pump(context)
            context.flush()
        case .stop:
            running = false
        }
    }

    func acked(_ frame: IMFrame, context: ChannelHandlerContext) {
        guard inflight > 0 else { return }
        inflight -= 1
        if let ack = try? Ack(frame: frame), ack.error != nil {
            counts.add(refused: 1)
        } else {
            counts.add(accepted: 1)
        }
        // Flushed by the handler at the end of the read burst.
        pump(context)
    }

    private func pump(_ context: ChannelHandlerContext) {
        guard running else { return }
        var written = 0
        while inflight < window {
            next += 1
            inflight += 1
            written += 1
            let chat = ChatSend(to: recipient, messageID: "\(prefix)-\(next)", content: .text("flood \(next)"))
            let frame = IMMessage.chat(chat).frame(
                sequence: BenchDeviceHandler.loginSequence &+ UInt32(truncatingIfNeeded: next), timestamp: 0,
                sessionID: BenchDeviceHandler.sessionID)
            context.write(NIOAny(frame), promise: nil)
        }
        counts.add(sent: written)
    }
}

/// What the flooders of a phase sent, and what the gateway took and refused.
final class FloodCounts: Sendable {
    struct Totals: Sendable {
        var sent = 0
        var accepted = 0
        var refused = 0
    }

    private let totals = Mutex(Totals())

    func add(sent: Int = 0, accepted: Int = 0, refused: Int = 0) {
        totals.withLock {
            $0.sent += sent
            $0.accepted += accepted
            $0.refused += refused
        }
    }

    var current: Totals { totals.withLock { $0 } }
}
