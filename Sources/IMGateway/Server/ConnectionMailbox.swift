import NIOCore
import IMArchive
import IMWire
import Mosquitto
import Synchronization

/// The one way back to a device connection's event loop: everything its background work and
/// its MQTT session produce (the login's outcome, received messages, chat verdicts, archive
/// pages, answers to requests, the session's loss and end, a request to leave), posted from
/// any thread under a lock and taken by the connection on its event loop in batches, in the
/// order posted. The first post after a take wakes the connection once, so a burst of
/// deliveries costs one hop to the event loop, not one each.
///
/// Hand-written because the library's ways cost per message what this costs per burst:
/// `EventLoop.execute` is an eventfd write and a wake-up each, and an `AsyncStream` or
/// `NIOAsyncChannel` would put a task and a suspension per connection on the data path.
final class ConnectionMailbox: Sendable {
    /// One piece of mail.
    enum Mail: Sendable {
        /// How the login ended.
        case loginFinished(LoginOutcome)
        /// The connection is to leave (a newer login of the device, the backend's
        /// disconnect); `promise` is completed once it has finished.
        case leave(ConnectionStateMachine.LeaveReason, EventLoopPromise<Void>?)
        /// Ending the device's MQTT session has completed.
        case sessionEnded
        /// A message on one of the session's subscriptions, and what its topic is for
        /// (classified once, on the MQTT loop).
        case message(MosquittoMessage, GatewayTopics.Kind?)
        /// What became of a chat the device sent (``ChatAcceptance``).
        case chatAnswered(ChatTicket, ChatAcceptance.Verdict)
        /// The members of a group the device's chats wait for, or why they could not be read.
        case groupResolved(String, Result<[String: UInt64], any Error>)
        /// Entries the device itself made (its own copy of a chat it sent, the tombstone of a
        /// message it deleted) are at these offsets of its user's stream, stored and not yet
        /// published: done for this device.
        case ownStored([UInt64])
        /// A TOKEN_REFRESH's token: its expiry (Unix ms), or why it is refused.
        case tokenVerified(Result<UInt64, LoginRefusal>, IMFrameHeader)
        /// A page of the device's stream, read for this.
        case page(Result<[StoredEntry], ArchiveError>, StreamSync.Read)
        /// The stream's bounds (and the device's saved position, if asked), to catch up from
        /// `asked`, answering the SYNC with `answering`.
        case bounds(Result<(StreamBounds, UInt64?), ArchiveError>, asked: StreamPosition?, answering: IMFrameHeader?)
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

    /// What a chat's ACK needs once ``ChatAcceptance`` answers.
    struct ChatTicket: Sendable {
        var messageID: String
        var sequence: UInt32
        var sessionID: UInt16
        /// When the gateway took it from the device, on the connection's clock: its ACK
        /// measures the chat path (``GatewayStatistics/chatAcknowledged(since:now:)``).
        var startedAt: NIODeadline
        /// Counted among the chats in flight (``Uplink``).
        var inUplink = true
    }

    private struct State {
        var mail: [Mail] = []
        /// The device's connection has closed (``deviceLeft()``).
        var deviceGone = false
        /// Called (outside the lock) by the post that finds the box empty.
        var wake: (@Sendable () -> Void)?
    }

    private let state: Mutex<State>

    /// A mailbox that calls `wake` when mail arrives in an empty box. `wake` is expected
    /// to schedule a ``take()`` (it is called on the poster's thread).
    init(wake: @escaping @Sendable () -> Void) {
        state = Mutex(State(wake: wake))
    }

    /// Adds mail; wakes the reader if the box was empty. Once closed it is dropped (a request
    /// to leave is then answered at once: the connection has finished).
    func post(_ mail: Mail) {
        let wake = state.withLock { state -> (@Sendable () -> Void)?? in
            guard let wake = state.wake else { return nil }
            state.mail.append(mail)
            return .some(state.mail.count == 1 ? wake : nil)
        }
        guard let wake else {
            if case .leave(_, let promise?) = mail { promise.succeed(()) }
            return
        }
        wake?()
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

    /// Drops what is left and the reference to the reader; later posts are ignored. Requests
    /// to leave among what is dropped are answered: the connection has finished.
    func close() {
        let dropped = state.withLock { state in
            defer {
                state.mail = []
                state.wake = nil
            }
            return state.mail
        }
        for case .leave(_, let promise?) in dropped { promise.succeed(()) }
    }
}
