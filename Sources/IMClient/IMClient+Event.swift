import IMWire

extension IMClient {
    /// Something the gateway told this device, in arrival order (``IMClient/events``).
    public enum Event: Sendable, Hashable {
        /// A chat message for this user. Already ACKed to the gateway; surfaced once per
        /// (sender, message id).
        case message(Message)
        /// A delivery or read receipt for a message this user sent.
        case receipt(Receipt)
        /// A watched user's device went online or offline (``IMClient/watchPresence(_:)``).
        case presence(Presence)
        /// A position shared with this user by a watched user (``IMClient/watchLocation(_:)``).
        case location(Location)
        /// A message on a subscribed topic (``IMClient/subscribe(_:)``).
        case publication(Publication)
        /// The sender deleted a message for everyone (``IMClient/delete(messageID:)``): remove
        /// it from the conversation. Comes once, online or at the next login.
        case deleted(Deletion)
        /// Another device of this user moved a read marker (``IMClient/markRead(_:through:)``
        /// there): the conversation's unread count is now ``ReadMarker/unread``.
        case readMarker(ReadMarker)
        /// Someone is typing (or stopped, recording, away) in a conversation with this user:
        /// holds for ``TypingState/lifetime`` seconds unless another comes.
        case typing(TypingUpdate)
        /// The gateway closed the session. SESSION_TAKEN_OVER (the same device logged in
        /// elsewhere), TOKEN_EXPIRED and FORBIDDEN end the client (``disconnected``
        /// follows); SERVER_SHUTTING_DOWN and IDLE_TIMEOUT are followed by ``reconnecting(_:)``,
        /// and so is TOKEN_EXPIRED with a ``Configuration/tokenProvider`` (the next LOGIN
        /// carries a token from it).
        case kicked(IMErrorCode, String?)
        /// An ERROR frame from the gateway. Codes that end the connection
        /// (``IMErrorCode/closesConnection``, 1xx) are followed by ``reconnecting(_:)``.
        case error(IMErrorCode, String?)
        /// The connection was lost; the client reconnects after the delay. Requests keep
        /// waiting (chat, receipts) or fail with ``IMClientError/disconnected`` (the rest).
        case reconnecting(Reconnecting)
        /// Logged in again after ``reconnecting(_:)``: watches and subscriptions are restored,
        /// unacknowledged messages are being sent again.
        case reconnected(Session)
        /// A gateway with a message archive caught this device up (after each login, and
        /// ``IMClient/sync()``): every stored message it had missed came before this event.
        case synced(SyncResult)
        /// The client ended without ``IMClient/close()`` or ``IMClient/logout()`` (a kick, a
        /// refused login, or a lost connection with ``Configuration/reconnect`` off): the
        /// last event; the stream finishes after it.
        case disconnected
    }

    /// A lost connection and the reconnect to come.
    public struct Reconnecting: Sendable, Hashable {
        /// Why the connection ended (or the last attempt failed).
        public var cause: IMClientError
        /// Failed attempts since the last login (0: the connection was just lost).
        public var attempt: Int
        /// When the next attempt starts, from now (seed 003's levels, with jitter).
        public var delay: Duration
    }

    /// A position of a watched user's device.
    public struct Location: Sendable, Hashable {
        /// The user sharing.
        public var user: String
        /// Their device, if the gateway named it.
        public var device: String?
        /// The position.
        public var location: IMLocation

        /// Creates a location event.
        public init(user: String, device: String?, location: IMLocation) {
            self.user = user
            self.device = device
            self.location = location
        }
    }

    /// A message received on a subscribed topic.
    public struct Publication: Sendable, Hashable {
        /// The topic, inside `im/t/`.
        public var topic: String
        /// The payload bytes.
        public var payload: [UInt8]
        /// The QoS it was delivered with.
        public var qos: IMQoS
        /// Whether the broker kept it as the topic's retained message.
        public var retain: Bool
        /// When the gateway forwarded it, Unix milliseconds.
        public var serverTime: UInt64?

        /// The payload as UTF-8 text, if it is.
        public var text: String? { String(validating: payload, as: UTF8.self) }

        /// Creates a publication.
        public init(topic: String, payload: [UInt8], qos: IMQoS, retain: Bool = false, serverTime: UInt64? = nil) {
            self.topic = topic
            self.payload = payload
            self.qos = qos
            self.retain = retain
            self.serverTime = serverTime
        }
    }

    /// A typing state of another user.
    public struct TypingUpdate: Sendable, Hashable {
        /// Who.
        public var from: String
        /// The group conversation, or `nil` for one-to-one.
        public var group: String?
        /// What they are doing.
        public var state: TypingState

        /// Creates a typing event.
        public init(from: String, group: String? = nil, state: TypingState) {
            self.from = from
            self.group = group
            self.state = state
        }
    }

    /// A received chat message: from another user (to this user or to a group), or a carbon
    /// of what this user sent from another device (``isCarbon``).
    public struct Message: Sendable, Hashable {
        /// The sender's user id (this user's own for a carbon).
        public var from: String
        /// The group it was sent to, for a group message.
        public var group: String?
        /// For a carbon of a one-to-one message: who it was sent to.
        public var to: String?
        /// Whether this is a copy of a message this user sent from another device.
        public var isCarbon: Bool
        /// The sender's message id.
        public var messageID: String
        /// The content: text, or bytes tagged image, file, voice, ...
        public var content: IMContent
        /// When the gateway accepted the message, Unix milliseconds: order conversations by it.
        public var serverTime: UInt64
        /// Set when the gateway may have delivered it before (to this device's session).
        public var resend: Bool
        /// Its place in this user's stream of stored messages, from a gateway with an archive.
        public var streamOffset: UInt64?
        /// Whether it came from the archive: the device had missed it (the broker lost it, or
        /// the device was away longer than its session).
        public var isArchived: Bool
        /// In history: its sender deleted it for everyone (``content`` is empty text, and
        /// ``serverTime`` is when it was deleted).
        public var isDeleted: Bool = false

        /// The text, for text content.
        public var text: String? { content.text }

        /// Creates a message.
        public init(
            from: String, messageID: String, content: IMContent, serverTime: UInt64, resend: Bool = false,
            group: String? = nil, to: String? = nil, isCarbon: Bool = false, streamOffset: UInt64? = nil, isArchived: Bool = false
        ) {
            self.streamOffset = streamOffset
            self.isArchived = isArchived
            self.from = from
            self.group = group
            self.to = to
            self.isCarbon = isCarbon
            self.messageID = messageID
            self.content = content
            self.serverTime = serverTime
            self.resend = resend
        }

        /// The message a DELIVERY (or a history record) carries, as it says.
        init(_ delivery: ChatDelivery) {
            self.init(
                from: delivery.from, messageID: delivery.messageID, content: delivery.content, serverTime: delivery.serverTime,
                resend: delivery.resend, group: delivery.group, to: delivery.to, isCarbon: delivery.carbon,
                streamOffset: delivery.streamOffset, isArchived: delivery.archived)
            self.isDeleted = delivery.deleted
        }
    }

    /// A message its sender deleted for everyone.
    public struct Deletion: Sendable, Hashable {
        /// The sender (this user, for a message it sent from another device: ``isCarbon``).
        public var from: String
        /// The deleted message's id.
        public var messageID: String
        /// The group, for a group message.
        public var group: String?
        /// For this user's own one-to-one message: its recipient.
        public var to: String?
        /// Whether this user sent it.
        public var isCarbon: Bool
        /// When it was deleted, Unix milliseconds.
        public var deletedAt: UInt64
        /// The tombstone's place in this user's stream.
        public var streamOffset: UInt64?
    }

    /// A receipt for a message this user sent.
    public struct Receipt: Sendable, Hashable {
        /// The recipient who received or read it.
        public var from: String
        /// The message's id.
        public var messageID: String
        /// Delivered (a device of the recipient stored it) or read.
        public var kind: IMReceiptKind
        /// When the gateway learned it, Unix milliseconds.
        public var serverTime: UInt64

        /// Creates a receipt.
        public init(from: String, messageID: String, kind: IMReceiptKind, serverTime: UInt64) {
            self.from = from
            self.messageID = messageID
            self.kind = kind
            self.serverTime = serverTime
        }
    }

    /// A presence change of one device of a watched user.
    public struct Presence: Sendable, Hashable {
        /// The user.
        public var user: String
        /// The device, if the gateway named it.
        public var device: String?
        /// Online or offline.
        public var status: PresenceNotice.Status
        /// For offline: when the device was last online, Unix milliseconds.
        public var lastSeen: UInt64?

        /// Creates a presence change.
        public init(user: String, device: String?, status: PresenceNotice.Status, lastSeen: UInt64? = nil) {
            self.user = user
            self.device = device
            self.status = status
            self.lastSeen = lastSeen
        }
    }

    /// How a catch-up from the gateway's archive went (``Event/synced(_:)``, ``IMClient/sync()``).
    public struct SyncResult: Sendable, Hashable {
        /// Where the device is now: everything of its stream up to here came.
        public var position: StreamPosition
        /// How the gateway took the device's position.
        public var status: IMSyncStatus
        /// Messages from the archive surfaced since the catch-up started.
        public var replayed: Int

        /// Creates a result.
        public init(position: StreamPosition, status: IMSyncStatus, replayed: Int) {
            self.position = position
            self.status = status
            self.replayed = replayed
        }
    }

    /// What the gateway answered to a chat message it accepted.
    public struct SendReceipt: Sendable, Hashable {
        /// The message's id.
        public var messageID: String
        /// When the gateway accepted it, Unix milliseconds (the recipients see the same).
        public var serverTime: UInt64?
        /// With a message archive: where it was stored in this user's own stream (the copy
        /// the user's other devices get).
        public var streamOffset: UInt64? = nil
    }
}
