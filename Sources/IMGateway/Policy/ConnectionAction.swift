import IMWire
import Logging
import NIOCore

/// What a device connection does after an event of its ``ConnectionStateMachine``: each action
/// carries everything needed to do it, so that ``DeviceConnection`` only does I/O. An event
/// returns its actions in the order they are to be done.
enum ConnectionAction: Sendable {
    /// Write `frame` after the frames written before (they leave together at the end of the
    /// turn).
    case write(IMFrame)
    /// Answer the HELLO with this header with HELLO_OK (what the gateway offers depends on its
    /// broker and archive), as the connection's frame `sequence`, at `timestamp`.
    case answerHello(IMFrameHeader, sequence: UInt32, timestamp: UInt32)
    /// Write `farewell` (if any) after what is pending, then close the channel once it is out.
    case close(farewell: IMFrame?)
    /// Read from the channel: a read held back (backpressure, a pause after RATE_LIMITED)
    /// happens now.
    case read
    /// Keep the connection's one timer armed for this deadline (replacing a later one).
    case armTimer(NIODeadline)
    /// Stop the timer (the connection is closing).
    case cancelTimer
    /// Verify LOGIN's token and open the device's MQTT session within `within` (what is left of
    /// the login deadline); the outcome comes back as mail
    /// (``ConnectionMailbox/Mail/loginFinished(_:)``).
    case startLogin(LoginRequest, within: TimeAmount)
    /// Stop a login under way: its time is up, or the connection has gone. A session it opens
    /// is still reported, and ended.
    case abandonLogin(ConnectionStateMachine.CloseReason)
    /// The login opened this session: keep it for the connection's I/O (also when the
    /// connection gave up meanwhile: it is then ended at once).
    case sessionOpened(OpenedSession)
    /// LOGIN_OK was written: the device counts as logged in, its requests can run, and a
    /// resumed session has its subscriptions and presence restored.
    case loggedIn(user: String, device: String, resumed: Bool)
    /// Hand the device's MQTT session what this turn gathered for it.
    case uplink(UplinkWork)
    /// Hand these chats, in order, to ``ChatAcceptance``; each verdict comes back as mail.
    case accept([PendingChat])
    /// Look up the members of this group (the chats behind one of its chats wait for them);
    /// they come back as mail.
    case lookUpGroup(String)
    /// Run this request on the connection's request lane (it answers as mail).
    case request(DeviceRequests.Job, IMFrameHeader)
    /// Verify a TOKEN_REFRESH's token; the outcome comes back as mail.
    case verifyToken(String, IMFrameHeader)
    /// Read from the device's stream in the archive; the page comes back as mail.
    case readArchive(StreamSync.Read)
    /// Read the stream's bounds (and, for a start not decided yet, the device's saved
    /// position) to catch up from `asked`, answering the SYNC with `answering`, if any.
    case readStreamBounds(needsStart: Bool, asked: StreamPosition?, answering: IMFrameHeader?)
    /// Save the device's position in the archive; `promptly`: the session ends.
    case savePosition(UInt64, promptly: Bool)
    /// End the device's MQTT session the way the reason says; `sessionEnded` comes back as
    /// mail.
    case endSession(ConnectionStateMachine.CloseReason)
    /// Complete this promise once the connection has finished (a newer login of the device, or
    /// the backend, waits for it).
    case whenFinished(EventLoopPromise<Void>)
    /// The channel is closed and nothing is left open: the connection has finished.
    case finish
    /// Log this line with the connection's metadata.
    case log(Logger.Level, Logger.Message, Logger.Metadata)
}

/// What one turn of a logged-in connection hands its MQTT session (``ConnectionAction/uplink(_:)``).
struct UplinkWork: Sendable, Hashable {
    /// MQTT deliveries the device (or the gateway) is done with: first, since under
    /// ack-through they release the session's writes.
    var acknowledgements: [UInt64]
    /// "Delivered" receipts: message ids by sender, in the order they came.
    var receipts: [DeliveredReceipt]
    /// Presence probes of other devices to answer.
    var probes: [PresenceProbePayload]
}

/// One "delivered" receipt to publish: `ids` of `sender`, delivered to this device.
struct DeliveredReceipt: Sendable, Hashable {
    var sender: String
    var ids: [String]
}
