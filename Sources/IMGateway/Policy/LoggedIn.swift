import IMWire
import Mosquitto
import NIOCore

/// The logged-in state of a ``ConnectionStateMachine``: who the device is, and the data path's
/// sub-machines, from LOGIN_OK until its MQTT session has ended.
struct LoggedIn: Sendable {
    /// The token's user.
    let user: String
    /// The device id.
    let device: String
    /// Its MQTT session (the loss of another, a session an earlier try of the login made, is
    /// not this connection's).
    let mqttSession: ObjectIdentifier
    /// LOGIN's RECEIPT_NOTICES: whether receipts on the user's topic become notices.
    let receiptNotices: Bool
    /// The highest QoS the broker takes (its last CONNACK).
    let maximumQoS: QoS
    /// Publishes of one chat in flight at once (``BrokerFit/publishWindow``).
    let publishWindow: Int
    /// Deliveries written to the device and not ACKed yet.
    var deliveries = PendingDeliveries()
    /// What goes to the MQTT side next.
    var uplink: Uplink<PendingChat>
    /// The device's rate limits.
    var rates: DeviceRateLimits
    /// What goes to the device next.
    var downlink = Downlink()
    /// The archive's side (catching up, gaps, SYNC), with an archive.
    var archive: ArchiveSync?

    init(session: any DeviceSession, brokerFit: BrokerFit, carbons: Bool, limits: ConnectionStateMachine.Limits) {
        self.user = session.user
        self.device = session.device
        self.mqttSession = ObjectIdentifier(session)
        self.receiptNotices = session.receiptNotices
        self.maximumQoS = brokerFit.maximumQoS
        self.publishWindow = brokerFit.publishWindow
        self.uplink = Uplink(maxInFlight: limits.maxInFlight)
        self.rates = DeviceRateLimits(chatRate: limits.chatRate, chatBurst: limits.chatBurst, locationRate: limits.locationRate)
        self.downlink.wantsCarbons = carbons
    }

    /// The data path's next deadline: the oldest unACKed delivery's, the receipts' window, the
    /// archive's timer.
    func nextDeadline(deliveryAckTimeout: TimeAmount) -> NIODeadline? {
        var next: NIODeadline?
        func consider(_ deadline: NIODeadline?) {
            guard let deadline else { return }
            next = next.map { min($0, deadline) } ?? deadline
        }
        consider(deliveries.oldest.map { $0 + deliveryAckTimeout })
        consider(uplink.receiptDeadline)
        consider(archive?.deadline)
        return next
    }

    /// The SYNC ACKs that are due: once no chat delivery waits in the downlink queue (those
    /// queued before an ACK are written before it).
    mutating func takeSyncAcks() -> [(ack: Ack, sessionID: UInt16)] {
        guard archive?.syncAcks.isEmpty == false, downlink.queue.count(of: .chat) == 0 else { return [] }
        defer { archive?.syncAcks = [] }
        return archive?.syncAcks ?? []
    }
}

/// A chat the device sent, checked and waiting for its turn (at most `broker.max_inflight` are
/// handed to ``ChatAcceptance`` and not answered); a group chat waits first for its members.
struct PendingChat: Sendable {
    var chat: ChatAcceptance.Chat
    var ticket: ConnectionMailbox.ChatTicket
}
