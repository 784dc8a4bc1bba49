import NIOCore
import IMArchive
import IMWire
import Mosquitto
import Synchronization

/// What the MQTT side hands a device connection, from the MQTT loop's thread: received
/// messages, the outcomes of chat publishes, the loss of the MQTT connection. Posted
/// under a lock and taken by the connection on its event loop in batches: the first post
/// after a take wakes the connection once, so a burst of deliveries costs one hop to the
/// event loop, not one each.
final class ConnectionMailbox: Sendable {
    /// One piece of mail.
    enum Mail: Sendable {
        /// A message on one of the session's subscriptions, and what its topic is for
        /// (classified once, on the MQTT loop).
        case message(MosquittoMessage, GatewayTopics.Kind?)
        /// The broker has (or refused) a chat message the device sent.
        case published(ChatTicket, Result<Void, MosquittoError>)
        /// The archive has (or refused) a chat message the device sent.
        case stored(StoringChat, Result<AppendOutcome, ArchiveError>)
        /// The device's own copy of a message it sent (a group chat) is at this offset of its
        /// user's stream: done for this device.
        case ownStored(UInt64)
        /// The MQTT connection of the session `session` (its `ObjectIdentifier`) ended. A
        /// login that tries CONNECT again makes a new session for it; the refused one's
        /// loss is not the connection's.
        case lost(LossReason, session: ObjectIdentifier)
        /// The device starts (`watching`) or stops watching these users' presence (posted
        /// before the SUBSCRIBE or UNSUBSCRIBE): what it was told of them is forgotten, so that
        /// a new watch's snapshot is told again; its own user among them lets the notices of
        /// its other devices through, or stops them.
        case presenceWatchChanged([String], watching: Bool)
        /// The answer to a request that ran on the request lane (``DeviceRequests``), with
        /// the session id of its frame.
        case replied(Ack, sessionID: UInt16)
        /// An answer that is a message of its own (HISTORY_PAGE, CONVERSATION_LIST), sent
        /// with the connection's next sequence and the request's session id.
        case answered(IMMessage, sessionID: UInt16)
        /// Work the logged-in session needs failed (restoring a resumed session's
        /// subscriptions): the device is told and the connection closes.
        case sessionFailed(String)
    }

    /// What a chat message's ACK needs once the broker has it.
    struct ChatTicket: Sendable {
        var messageID: String
        /// For the de-duplication window, once the broker has it.
        var fingerprint: ChatFingerprint
        var sequence: UInt32
        var sessionID: UInt16
        var serverTime: UInt64
        /// Its offline-push notification, once the broker has it: only with `push.url`, and
        /// not while a device of the recipient is online.
        var push: PushNotification? = nil
        /// With the archive: its offset in the sender's own stream (the ACK says it).
        var streamOffset: UInt64? = nil
        /// When the gateway took it from the device: its ACK measures the chat path
        /// (``GatewayStatistics/chatAcknowledged(since:)``).
        var startedAt = NIODeadline.now()
    }

    /// A chat message on its way into the archive, and what its publish and ACK will need.
    struct StoringChat: Sendable {
        var chat: ChatSend
        var ticket: ChatTicket
    }

    private struct State {
        var mail: [Mail] = []
        /// The device's connection has closed (``deviceLeft()``).
        var deviceGone = false
        /// Called (outside the lock) by the post that finds the box empty.
        var wake: (@Sendable () -> Void)?
        /// Once closed: what becomes of a chat the broker took after all (see ``close(accepted:)``).
        var accepted: (@Sendable (ChatTicket) -> Void)?
    }

    private let state: Mutex<State>

    /// A mailbox that calls `wake` when mail arrives in an empty box. `wake` is expected
    /// to schedule a ``take()`` (it is called on the poster's thread).
    init(wake: @escaping @Sendable () -> Void) {
        state = Mutex(State(wake: wake))
    }

    /// Adds mail; wakes the reader if the box was empty. Once closed it is dropped, but for a
    /// chat the broker took, which goes to the handler given to ``close(accepted:)``.
    func post(_ mail: Mail) {
        let (wake, accepted) = state.withLock { state -> ((@Sendable () -> Void)?, (@Sendable (ChatTicket) -> Void)?) in
            guard let wake = state.wake else { return (nil, state.accepted) }
            state.mail.append(mail)
            return (state.mail.count == 1 ? wake : nil, nil)
        }
        wake?()
        if let accepted, case .published(let ticket, .success) = mail { accepted(ticket) }
    }

    /// The device's connection has closed: a login still trying the broker's CONNECT stops
    /// (a session it opened now would only take the device's newer session elsewhere over).
    func deviceLeft() {
        state.withLock { $0.deviceGone = true }
    }

    /// Whether ``deviceLeft()`` was called; read by the login's task.
    var isDeviceGone: Bool { state.withLock { $0.deviceGone } }

    /// Everything posted since the last take, in order.
    func take() -> [Mail] {
        // Handed over whole, storage and all: keeping the capacity would copy it (the array
        // returned shares the storage) and an idle connection would hold its busiest batch's.
        state.withLock { state in
            let mail = state.mail
            state.mail = []
            return mail
        }
    }

    /// Drops what is left and the reference to the reader; later posts are ignored. A chat the
    /// broker took, among what is dropped or posted later, goes to `accepted` (a handler given
    /// before stays when this one is `nil`): accepted is accepted, read or not, so that its
    /// id is recorded for the device's RESEND.
    func close(accepted: (@Sendable (ChatTicket) -> Void)? = nil) {
        let (dropped, handler) = state.withLock { state in
            defer {
                state.mail = []
                state.wake = nil
            }
            state.accepted = accepted ?? state.accepted
            return (state.mail, state.accepted)
        }
        guard let handler else { return }
        for case .published(let ticket, .success) in dropped { handler(ticket) }
    }
}
