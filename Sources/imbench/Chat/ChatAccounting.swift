/// What the gateway path's sending and receiving devices record: ``ChatLedger`` for
/// `imbench chat` (a pair is one sender and its receiver), ``GroupLedger`` for `imbench group`
/// (one sender; a "pair" on the receiving side is a member).
protocol ChatAccounting: AnyObject, Sendable {
    /// A message of `pair` left the sender.
    func sent(pair: Int)
    /// The gateway (or broker) accepted message `sequence` of `pair`. Returns true when the
    /// message was received already, by everyone it is for (it no longer holds a window slot).
    func acked(pair: Int, sequence: Int) -> Bool
    /// The gateway refused a message of `pair` (negative ACK), or the publish failed.
    func refused(pair: Int, reason: String)
    /// The sender of `pair` got a RECEIPT_NOTICE.
    func receiptNotice(pair: Int)
    /// Receiver `pair` got message `sequence`, sent at `sentAt` (monotonic ns). Returns true
    /// when this first copy completes a message that was ACKed already (its window slot is
    /// free now).
    func received(pair: Int, sequence: Int, sentAt: UInt64, now: UInt64) -> Bool
}

/// What a chat phase reports on while it runs and once it has drained (``ChatPhase``).
protocol PhaseAccounting: Sendable {
    /// Counts so far.
    func totals() -> ChatLedger.Totals
    /// True when nothing is in flight any more.
    func isDrained() -> Bool
    /// The final figures (after the drain).
    func report() -> ChatLedger.Report
}

extension ChatLedger: ChatAccounting, PhaseAccounting {}
