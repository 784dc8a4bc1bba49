import IMWire
import NIOCore

/// The receiving device of one gateway pair (or one group member): records each DELIVERY's latency, sequence
/// and duplicates in the ledger (its ACK is sent by ``BenchDeviceHandler``), and frees the
/// sender's window slot of a message that was ACKed already.
final class ChatReceiver: DeviceBehaviour {
    private let pair: Int
    private let ledger: any ChatAccounting
    private let link: PairLink

    init(pair: Int, ledger: any ChatAccounting, link: PairLink) {
        self.pair = pair
        self.ledger = ledger
        self.link = link
    }

    func received(_ frame: IMFrame, context: ChannelHandlerContext) {
        let now = MonotonicClock.nanoseconds()
        guard frame.header.type == .data, case .delivery(let delivery)? = try? IMMessage(frame: frame),
            let (sequence, sentAt) = BenchPayload.parse(delivery.content.value.readableBytesView)
        else { return }
        if ledger.received(pair: pair, sequence: sequence, sentAt: sentAt, now: now) {
            link.sender?.completed()
        }
    }
}
