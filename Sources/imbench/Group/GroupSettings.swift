/// The workload of one `imbench group` phase, the same for the gateway and the raw paths.
struct GroupSettings: Sendable {
    /// Members of the group, the sender included.
    var members: Int
    /// Members (other than the sender) that are offline during the phase.
    var offline: Int
    /// How long the sender sends.
    var seconds: Double
    /// Messages the sender keeps in flight (sent and not yet both ACKed and received by every
    /// online member), at most.
    var window: Int
    /// 1 or 2.
    var qos: Int
    /// Message content bytes.
    var size: Int
    /// How long to wait after the sender stops for what is in flight, and for the offline
    /// members' queues once they are back.
    var drainSeconds: Double
    /// Gateway path: the sender takes RECEIPT_NOTICE frames (one per member and message).
    var receiptNotices: Bool

    /// Members other than the sender that are online.
    var online: Int { members - 1 - offline }

    /// The same workload as chat settings (one sender), for ``ChatSender``.
    var chat: ChatSettings {
        var settings = ChatSettings(seconds: seconds, pairs: 1, rate: nil, window: window, qos: qos, size: size, drainSeconds: drainSeconds)
        settings.receiptNotices = receiptNotices
        return settings
    }
}
