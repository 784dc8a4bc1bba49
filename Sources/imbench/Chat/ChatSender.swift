import IMWire
import NIOCore

/// The sending device of one gateway pair: once started, keeps up to `window` messages in
/// flight (closed loop), or sends at its share of the rate (open loop, still bounded by the
/// window). A message is in flight until it is both ACKed and received (``ChatLedger``).
/// Message `n` travels in frame sequence `n + 1` (the LOGIN is 1), so an ACK names its
/// message by its header sequence.
final class ChatSender: DeviceBehaviour {
    private let pair: Int
    private let recipient: String
    private let toGroup: Bool
    private let ledger: any ChatAccounting
    private let settings: ChatSettings
    private let qos: IMQoS
    private var inflight = 0
    private var lastSequence = 0
    private var running = false
    private var startedAt: UInt64 = 0
    private var timer: RepeatedTask?
    /// Self and the channel context, for work that starts outside the channel's own events.
    private var bound: NIOLoopBound<(ChatSender, ChannelHandlerContext)>?
    private var flushScheduled = false

    /// - Parameter toGroup: `recipient` is a group (CHAT with GROUP: one copy per member).
    init(pair: Int, recipient: String, toGroup: Bool = false, ledger: any ChatAccounting, settings: ChatSettings, link: PairLink) {
        self.pair = pair
        self.recipient = recipient
        self.toGroup = toGroup
        self.ledger = ledger
        self.settings = settings
        self.qos = settings.qos == 2 ? .exactlyOnce : .atLeastOnce
        link.sender = self
    }

    func handle(_ event: BenchEvent, context: ChannelHandlerContext) {
        switch event {
        case .start:
            running = true
            startedAt = MonotonicClock.nanoseconds()
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            self.bound = bound
            if let rate = settings.ratePerPair {
                // Wake up as often as one message is due, at most every 200 µs.
                let interval = max(200_000, Int64(1e9 / rate))
                timer = context.eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: .nanoseconds(interval)) { _ in
                    let (sender, context) = bound.value
                    sender.pump(context, flush: true)
                }
            } else {
                pump(context, flush: true)
            }
        case .stop:
            running = false
            timer?.cancel()
            timer = nil
        }
    }

    /// A RECEIPT_NOTICE for one of this sender's messages (the handler has ACKed it).
    func received(_ frame: IMFrame, context: ChannelHandlerContext) {
        if frame.header.type == .readReceipt { ledger.receiptNotice(pair: pair) }
    }

    func acked(_ frame: IMFrame, context: ChannelHandlerContext) {
        let sequence = Int(frame.header.sequence) - 1
        guard sequence >= 1, sequence <= lastSequence else { return }
        if frame.header.bodyLength > 0, let ack = try? Ack(frame: frame), let code = ack.error {
            ledger.refused(pair: pair, reason: "\(code) \(ack.errorMessage ?? "")")
            inflight -= 1
        } else if ledger.acked(pair: pair, sequence: sequence) {
            inflight -= 1
        }
        // Flushed by the handler at the end of this read burst.
        pump(context, flush: false)
    }

    /// The receiver got a message that was ACKed already: its slot is free. Called from the
    /// receiver's channel (same event loop); the writes are flushed once that read burst is over.
    func completed() {
        inflight -= 1
        guard running, let bound else { return }
        pump(bound.value.1, flush: false)
        if !flushScheduled {
            flushScheduled = true
            bound.value.1.eventLoop.execute {
                let (sender, context) = bound.value
                sender.flushScheduled = false
                context.flush()
            }
        }
    }

    func closed() {
        running = false
        timer?.cancel()
        timer = nil
        bound = nil
    }

    /// Sends what the window (and the rate) allow now.
    private func pump(_ context: ChannelHandlerContext, flush: Bool) {
        guard running else { return }
        var budget = settings.window - inflight
        if let rate = settings.ratePerPair {
            let due = Int(Double(MonotonicClock.nanoseconds() - startedAt) * rate / 1e9) + 1 - lastSequence
            budget = min(budget, due)
        }
        guard budget > 0 else { return }
        for _ in 0..<budget { send(context) }
        if flush { context.flush() }
    }

    private func send(_ context: ChannelHandlerContext) {
        lastSequence += 1
        let sequence = lastSequence
        let payload = BenchPayload.make(sequence: sequence, sentAt: MonotonicClock.nanoseconds(), size: settings.size)
        let content = IMContent(tag: .text, value: ByteBuffer(bytes: payload))
        let chat = toGroup
            ? ChatSend(group: recipient, messageID: "\(pair)-\(sequence)", content: content, qos: qos)
            : ChatSend(to: recipient, messageID: "\(pair)-\(sequence)", content: content, qos: qos)
        let frame = chat.frame(
            sequence: UInt32(truncatingIfNeeded: sequence + 1), timestamp: MonotonicClock.unixSeconds(),
            sessionID: BenchDeviceHandler.sessionID)
        inflight += 1
        ledger.sent(pair: pair)
        context.write(NIOAny(frame), promise: nil)
    }
}
