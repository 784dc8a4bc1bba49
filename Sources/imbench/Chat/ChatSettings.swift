/// The chat workload, the same for the gateway and the direct path.
struct ChatSettings: Sendable {
    /// How long senders send.
    var seconds: Double
    /// Sender → receiver pairs.
    var pairs: Int
    /// Total messages per second over all pairs; nil: as fast as the window allows.
    var rate: Double?
    /// Messages a sender keeps unacknowledged at most.
    var window: Int
    /// 1 or 2.
    var qos: Int
    /// Message content bytes.
    var size: Int
    /// How long to wait after the senders stop for what is in flight.
    var drainSeconds: Double
    /// Gateway path: the flows are paired up on devices that send and receive at once
    /// (flow 2k from device a_k to b_k, flow 2k+1 back), instead of one sender and one
    /// receiver device per flow. `pairs` counts flows either way.
    var duplex = false
    /// Gateway path: the devices take RECEIPT_NOTICE frames (the protocol's default), one per
    /// chat to its sender, which ACKs it. The direct path has nothing like them.
    var receiptNotices = true
    /// Gateway path: hostile devices beside the pairs that flood chat as fast as the gateway
    /// answers, ignoring RATE_LIMITED (``FloodSender``).
    var flooders = 0
    /// CHAT frames each flooder keeps unanswered.
    var floodWindow = 256

    /// Messages per second per pair, with a rate.
    var ratePerPair: Double? { rate.map { $0 / Double(pairs) } }
}
