/// Joins the two devices of a gateway pair, which share one event loop: the receiver tells
/// the sender when a message that was already ACKed arrives (its window slot is free).
/// Used on that event loop only.
final class PairLink {
    weak var sender: ChatSender?

    init() {}
}
