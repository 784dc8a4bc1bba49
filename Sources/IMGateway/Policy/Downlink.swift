import IMWire

/// What a logged-in connection holds for the device: frames queued by priority
/// (``DownlinkQueue``) and what decides whether a message from the broker becomes one (the
/// device's carbons choice, the user's other devices, presence already told, the server
/// API's messages already delivered). Part of ``ConnectionStateMachine``.
struct Downlink: Sendable {
    /// A frame for the device.
    struct Entry: Sendable {
        var message: IMMessage
        /// The MQTT delivery to acknowledge when the device ACKs this frame.
        var deliveryID: UInt64?
        /// For a chat delivery: whom to send the "delivered" receipt.
        var origin: PendingDeliveries.Origin?
        /// Its offset in the user's stream, when the archive stored it.
        var offset: UInt64? = nil

        /// Whether the device must ACK it (a delivery, or a QoS 1 PUBLISH).
        var isAwaited: Bool { self.deliveryID != nil || self.offset != nil }
    }

    /// Frames waiting for the socket.
    var queue = DownlinkQueue<Entry>()
    /// LOGIN's CARBONS: whether this device takes carbons of what the user's other devices send.
    var wantsCarbons = true
    /// The user's other devices that have a session (a retained presence): carbons are made
    /// only when there is one.
    private(set) var ownDevices: Set<String> = []
    /// The last presence told to the device, per watched device: the same presence, retained
    /// and in a probe's answer, is told once.
    private var presenceTold = PresenceMemory()
    /// Sender and id of the last messages the server API sent to this device.
    private var apiMessages = RecentKeys(capacity: 1024)

    /// Whether carbons of what this device sends are made.
    var makesCarbons: Bool { !self.ownDevices.isEmpty }

    /// Another device of the user has a session (`present`) or not.
    mutating func ownDevice(_ device: String, present: Bool) {
        if present { self.ownDevices.insert(device) } else { self.ownDevices.remove(device) }
    }

    /// Whether `presence` of `user`'s device is news to the device (and remembers it).
    mutating func isNews(user: String, _ presence: PresencePayload) -> Bool {
        self.presenceTold.isNews(user: user, presence)
    }

    /// Whether the device watches its own user's presence. The session follows it anyway (for
    /// carbons), so a watch only lets the notices through.
    private(set) var ownPresenceWatched = false

    /// The device starts (`watching`) or stops watching `users`: what it was told of them is
    /// forgotten; `own` (its user) among them turns the notices of its other devices on or off.
    mutating func watchChanged(_ users: [String], watching: Bool, own: String?) {
        self.presenceTold.forget(users: users)
        if let own, users.contains(own) { self.ownPresenceWatched = watching }
    }

    /// A message the server API sent, from `sender` with `messageID`: false when this
    /// connection delivered it already (another gateway published it again).
    mutating func isFirstAPIMessage(from sender: String, id messageID: String) -> Bool {
        self.apiMessages.insert(sender + "\u{0}" + messageID)
    }
}
