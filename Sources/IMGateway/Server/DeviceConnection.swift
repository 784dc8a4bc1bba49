import DequeModule
import Foundation
import IMWire
import Logging
import Mosquitto
import NIOCore
import Synchronization

/// One TLV connection, as a channel handler on the connection's event loop: login, then
/// chat, receipts and deliveries through the device's MQTT session, until logout, drop,
/// a deadline, takeover, the broker's loss or shutdown.
///
/// The connection's course is decided by the pure ``ConnectionStateMachine``: this handler
/// feeds it events (frames, login outcomes, its one timer, the channel closing, the session
/// ended) and performs the actions it returns. The handler only does I/O. Nothing waits in
/// a task while the device is idle (a connection costs its objects, not a task tree):
/// - frames are handled as they are read; what a read burst asks of the MQTT client (chat
///   publishes, acknowledgements of deliveries, "delivered" receipts) goes to the MQTT loop
///   in one ``MosquittoClient/perform(_:)`` at the end of the burst;
/// - what the MQTT side produces (messages, publish outcomes, the loss of the connection)
///   comes back through a ``ConnectionMailbox``; ``MailboxWakeups`` drains the mailboxes
///   that one turn of the MQTT loop filled with one task per event loop;
/// - requests that wait for the broker's answer (SUBSCRIBE, presence, location, read
///   receipts) run in order on a ``RequestLane``, a task that exists only while they do;
/// - the login (token, MQTT connect, subscriptions) runs on a task of its own, once.
final class DeviceConnection: ChannelDuplexHandler {
    typealias InboundIn = IMFrame
    typealias OutboundIn = IMFrame
    typealias OutboundOut = IMFrame

    let gateway: GatewayContext
    let sequence: OutboundSequence
    var logger: Logger
    var machine: ConnectionStateMachine
    /// Set between handlerAdded and handlerRemoved.
    var channelContext: ChannelHandlerContext?
    /// Frames were written since the last flush.
    var needsFlush = false
    /// The one timer, armed for the machine's next deadline.
    var timer: (task: Scheduled<Void>, deadline: NIODeadline)?
    /// Completed once the connection has finished (channel closed, MQTT session ended).
    var finished: EventLoopPromise<Void>?

    // The session, once the login opened it.
    var session: (any DeviceSession)?
    var registration: UInt64?
    var mailbox: ConnectionMailbox?
    /// Set at LOGIN_OK.
    var requests: DeviceRequests?
    /// What the session's CONNACK made of the broker (set with `session`).
    var brokerFit: BrokerFit?
    let lane = RequestLane()
    /// Mail that arrived before LOGIN_OK was written.
    var early: [ConnectionMailbox.Mail] = []
    /// Set when the device's connection closes: a login still trying the broker's CONNECT
    /// again stops (its session, if it got one, would only take the device's newer session
    /// elsewhere over).
    let closed = ClosedFlag()

    /// Whether the connection has closed, readable from the login's task.
    final class ClosedFlag: Sendable {
        private let value = Atomic<Bool>(false)
        func set() { value.store(true, ordering: .relaxed) }
        var isSet: Bool { value.load(ordering: .relaxed) }
    }

    // The data path.
    /// Frames for the device, queued by priority.
    var downlink = DownlinkQueue<DownlinkEntry>()
    /// Chat messages waiting to be handed to the MQTT client, in order.
    var chatsToStart = Deque<ChatStart>()
    /// Chat messages handed to the MQTT client and not settled yet (at most
    /// `broker.max_inflight`: libmosquitto searches its in-flight list linearly).
    var chatsInFlight = 0
    /// MQTT deliveries the device (or the gateway) is done with, gathered in this burst.
    var acknowledgements: [UInt64] = []
    /// Sender and id of the last messages the server API sent to this device.
    var apiMessages = RecentKeys(capacity: 1024)
    /// LOGIN's CARBONS: whether this device takes carbons of what the user's other devices send.
    var wantsCarbons = true
    /// TYPING signals a connection may send per second.
    static let typingRate = 4
    /// The user's other devices that have a session (a retained presence): carbons are made
    /// only when there is one.
    var ownDevices: Set<String> = []
    /// The last presence told to the device, per watched device (``PresenceMemory``): the
    /// same presence, retained and in a probe's answer, is told once.
    var presenceTold = PresenceMemory()
    /// Presence probes to answer with the next uplink batch (at most ``presenceProbeBatch``).
    var presenceProbes: [PresenceProbePayload] = []
    /// The most probes answered per uplink batch: a flood of probes costs the broker no more
    /// than this many answers per mailbox batch.
    static let presenceProbeBatch = 64
    /// ACKed chat deliveries whose "delivered" receipt is not published yet.
    var delivered: [PendingDeliveries.Origin] = []
    /// Set while `delivered` waits for ``receiptWindow`` to pass.
    var receiptTimer: Scheduled<Void>?
    var locationLimiter: RateLimiter
    /// TYPING: 4 a second, 8 back to back (PROTOCOL.md 6.13).
    var typingLimiter = RateLimiter(ratePerSecond: Double(DeviceConnection.typingRate), burst: 8)
    /// `limits.chat_rate` and `chat_burst` for this connection's CHATs.
    var chatLimit: ChatRateLimit
    /// The message archive's side of the connection, from LOGIN_OK (``ArchiveLink``).
    var archiveLink: ArchiveLink?
    /// This connection's place in `limits.max_connections_*` (nil: not counted).
    let admission: ConnectionAdmissions.Ticket?

    /// How long "delivered" receipts are gathered before they are published (one MQTT
    /// message per sender for all of them), unless ``receiptBatch`` are waiting first. A
    /// receipt is not urgent, and one per read burst of a busy device cost a fifth of the
    /// gateway's CPU; but a large batch arrives at the sender's connection as one burst of
    /// work that delays its chat ACKs.
    static let receiptWindow: TimeAmount = .milliseconds(10)
    static let receiptBatch = 64

    /// A frame for the device, queued by priority (``DownlinkQueue``).
    struct DownlinkEntry {
        var message: IMMessage
        /// The MQTT delivery to acknowledge when the device ACKs this frame.
        var deliveryID: UInt64?
        /// For a chat delivery: whom to send the "delivered" receipt.
        var origin: PendingDeliveries.Origin?
        /// Its offset in the user's stream, when the archive stored it.
        var offset: UInt64? = nil
    }

    init(
        gateway: GatewayContext, sequence: OutboundSequence, peer: String, now: NIODeadline,
        admission: ConnectionAdmissions.Ticket? = nil
    ) {
        self.gateway = gateway
        self.sequence = sequence
        self.admission = admission
        var logger = gateway.logger
        logger[metadataKey: "peer"] = "\(peer)"
        self.logger = logger
        let limits = gateway.configuration.limits
        self.machine = ConnectionStateMachine(
            limits: .init(
                loginTimeout: .seconds(Int64(limits.loginTimeout)), idleTimeout: .seconds(Int64(limits.idleTimeout)),
                deliveryAckTimeout: .seconds(Int64(limits.deliveryAckTimeout)),
                tokenLeeway: .seconds(Int64(gateway.configuration.auth.leeway))),
            now: now)
        let location = gateway.configuration.location
        self.locationLimiter = RateLimiter(ratePerSecond: location.maxUpdatesPerSecond, burst: max(1, location.maxUpdatesPerSecond))
        self.chatLimit = ChatRateLimit(ratePerSecond: limits.chatRate, burst: limits.chatBurst)
    }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        channelContext = context
        let loop = context.eventLoop
        let bound = NIOLoopBound(self, eventLoop: loop)
        let wakeups = gateway.wakeups
        let drain: @Sendable () -> Void = { bound.value.drainMailbox() }
        mailbox = ConnectionMailbox { wakeups.wake(on: loop, drain) }
        let finished = loop.makePromise(of: Void.self)
        self.finished = finished
        let connections = gateway.statistics.connections
        connections.enter()
        let admission = self.admission
        finished.futureResult.whenComplete { _ in
            admission?.closed()
            connections.leave()
        }
        armTimer()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        cancelTimer()
        channelContext = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let message: IMMessage
        switch Result(catching: { () throws(IMWireError) -> IMMessage in try IMMessage(frame: frame) }) {
        case .success(let decoded):
            message = decoded
        case .failure(let error):
            if error.isFatal {
                closeOnMalformedFrame(error)
            } else if IMMessage.operation(of: frame) == .login {
                perform(machine.handle(.loginMalformed(frame.header, error.errorCode, "\(error)")), frame: frame)
            } else {
                // Well framed, not a valid message: refuse it, stay open.
                write(Ack.refusing(sequence: frame.header.sequence, code: error.errorCode, message: "\(error)").frame(
                    timestamp: unixSeconds(), sessionID: frame.header.sessionID))
            }
            return
        }
        let event = ConnectionStateMachine.Event.frameReceived(Self.kind(of: message), frame.header, now: context.eventLoop.now)
        perform(machine.handle(event), frame: frame, message: message)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        startUplink()
        flushIfNeeded()
        context.fireChannelReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        let writable = context.channel.isWritable
        if writable {
            writeDownlink()
            flushIfNeeded()
        }
        if machine.backpressureChanged(writable: writable) { context.read() }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        cancelTimer()
        closed.set()
        perform(machine.handle(.channelClosed))
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            // Graceful shutdown, whether or not the device has logged in.
            _ = leave(.shutdown)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? IMWireError, error.isFatal {
            closeOnMalformedFrame(error)
        } else {
            logger.debug("connection dropped", metadata: ["error": "\(error)"])
            context.close(promise: nil)
        }
    }

    func read(context: ChannelHandlerContext) {
        // Backpressure (``ReadGate``): a device sending chat faster than the broker takes
        // it waits; a device that does not read what it is sent is not read either. (Not
        // reading, it sends no heartbeat that arrives: the idle timeout ends it if it never
        // reads again.)
        if machine.readRequested() { context.read() }
    }

    // MARK: Actions

    static func kind(of message: IMMessage) -> ConnectionStateMachine.FrameKind {
        switch message {
        case .heartbeat: .heartbeat
        case .hello: .hello
        case .login: .login
        case .logout: .logout
        case .ack: .ack
        default: .other
        }
    }

    /// What HELLO_OK offers: everything, except QoS 2 chat on a broker that takes at most
    /// QoS 1 (as its last CONNACK said), and the archive's catch-up without an archive.
    static func features(broker: BrokerFit?, archive: Bool) -> IMFeatures {
        var features: IMFeatures = [.zlib, .qos2Chat, .receipts, .presence, .location, .pubSub, .groups, .carbons, .typing]
        if let broker, broker.maximumQoS < .exactlyOnce { features.remove(.qos2Chat) }
        if archive { features.insert(.archive) }
        return features
    }

    /// Does what the state machine said; `frame` and `message` are the frame that caused it.
    func perform(_ action: ConnectionAction, frame: IMFrame? = nil, message: IMMessage? = nil) {
        switch action {
        case .none:
            return
        case .answerHeartbeat:
            if let frame, let reply = IMFrame.heartbeatReply(to: frame, timestamp: unixSeconds()) { write(reply) }
        case .answerHello:
            guard let frame else { return }
            send(.helloOK(HelloOK(
                version: .current, features: Self.features(broker: gateway.brokerFit, archive: gateway.archive != nil),
                maxBodyLength: UInt32(gateway.configuration.limits.maxBodyLength), refSequence: frame.header.sequence)),
                sessionID: frame.header.sessionID)
        case .startLogin:
            guard case .login(let request) = message else { return }
            startLogin(request)
            armTimer()
        case .completeLogin:
            // Only from `loginFinished`, which performs it with what the login opened.
            assertionFailure("LOGIN_OK is written by loginFinished")
        case .handleFrame:
            guard let frame, let message else { return }
            handleRequest(message, frame)
        case .reject(let code, let text):
            guard let frame else { return }
            write(Ack.refusing(sequence: frame.header.sequence, code: code, message: text)
                .frame(timestamp: unixSeconds(), sessionID: frame.header.sessionID))
        case .close(let farewell):
            close(with: farewell)
        case .endSession(let reason):
            endSession(reason)
        case .finish:
            mailbox?.close()
            lane.close()
            finished?.succeed(())
        case .resumeReading:
            channelContext?.read()
        }
    }

    /// Writes the farewell (after what is pending) and closes the channel once it is out.
    private func close(with farewell: ConnectionAction.Farewell) {
        cancelTimer()
        let frame: IMFrame
        switch farewell {
        case .error(let code, let text, let refSequence):
            logger.info("closing", metadata: ["code": "\(code)", "reason": "\(text)"])
            let sessionID = refSequence != nil ? machine.loginHeader?.sessionID ?? machine.sessionID : machine.sessionID
            frame = IMMessage.error(ErrorNotice(code: code, message: text, refSequence: refSequence))
                .frame(sequence: sequence.next(), timestamp: unixSeconds(), sessionID: sessionID)
        case .kick(let code, let text):
            logger.info("kicked", metadata: ["code": "\(code)", "reason": "\(text)"])
            frame = IMMessage.kick(Kick(reason: code, message: text))
                .frame(sequence: sequence.next(), timestamp: unixSeconds(), sessionID: machine.sessionID)
        case .acknowledgeLogout(let header):
            frame = Ack(sequence: header.sequence).frame(timestamp: unixSeconds(), sessionID: header.sessionID)
        }
        writeThenClose(frame)
    }

    /// A newer login of this device, or the gateway shutting down: KICK (or ERROR before
    /// LOGIN_OK), close, end the MQTT session. The future completes once the connection has
    /// finished.
    func leave(_ event: ConnectionStateMachine.Event) -> EventLoopFuture<Void> {
        perform(machine.handle(event))
        flushIfNeeded()
        return finished!.futureResult
    }

    /// Ends the device's MQTT session the way `reason` says; reports `sessionEnded`.
    func endSession(_ reason: ConnectionStateMachine.CloseReason) {
        guard let session, let loop = channelContext?.eventLoop ?? finished?.futureResult.eventLoop else {
            // Nothing to end (the machine only asks once a login opened one): done at once.
            perform(machine.handle(.sessionEnded))
            return
        }
        // What the device ACKed goes first: acknowledgements and "delivered" receipts; its
        // position is saved.
        receiptTimer?.cancel()
        receiptTimer = nil
        let acceptance = self.acceptance
        closeArchiveLink()
        startUplink(receiptsDue: true, ending: true)
        mailbox?.close(accepted: acceptance)
        lane.close()
        if requests != nil {
            gateway.statistics.loggedIn.subtract(1, ordering: .relaxed)
        }
        logger.info("session ended", metadata: ["reason": "\(reason)"])
        let registry = gateway.registry
        let registration = self.registration
        let bound = NIOLoopBound(self, eventLoop: loop)
        Task {
            await session.end(reason)
            if let registration { await registry.unregister(user: session.user, device: session.device, id: registration) }
            loop.execute { bound.value.perform(bound.value.machine.handle(.sessionEnded)) }
        }
    }

    // MARK: The timer

    /// Keeps the one timer armed for the machine's next deadline. A timer that fires
    /// before the deadline moved later re-arms (a frame pushes the idle deadline back
    /// without touching the timer).
    func armTimer() {
        guard let context = channelContext, let deadline = machine.nextDeadline else {
            cancelTimer()
            return
        }
        if let armed = timer?.deadline, armed <= deadline { return }
        timer?.task.cancel()
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        timer = (context.eventLoop.scheduleTask(deadline: deadline) { bound.value.timerFired() }, deadline)
    }

    private func timerFired() {
        timer = nil
        guard let context = channelContext else { return }
        let now = context.eventLoop.now
        perform(machine.handle(.timerFired(now: now)))
        // The machine's next deadline is what its timer event checks: one that has passed
        // has been acted on (else this would fire again at once, for ever).
        assert(machine.nextDeadline.map { $0 > now } ?? true, "a deadline passed and the machine did nothing")
        flushIfNeeded()
        armTimer()
    }

    private func cancelTimer() {
        timer?.task.cancel()
        timer = nil
    }

    // MARK: Writing

    func write(_ frame: IMFrame) {
        channelContext?.write(wrapOutboundOut(frame), promise: nil)
        needsFlush = true
    }

    /// Sends a message with the next sequence number.
    func send(_ message: IMMessage, sessionID: UInt16? = nil) {
        write(message.frame(sequence: sequence.next(), timestamp: unixSeconds(), sessionID: sessionID ?? machine.sessionID))
    }

    func flushIfNeeded() {
        guard needsFlush else { return }
        needsFlush = false
        channelContext?.flush()
    }

    /// Writes `frame` (after what is pending) and closes the channel once it is out.
    func writeThenClose(_ frame: IMFrame) {
        guard let context = channelContext else { return }
        needsFlush = false
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(frame)).whenComplete { _ in channel.close(promise: nil) }
    }

    /// The stream is no longer framed: say why, then close.
    func closeOnMalformedFrame(_ error: IMWireError) {
        logger.notice("closing on a malformed frame", metadata: ["error": "\(error)"])
        cancelTimer()
        writeThenClose(error.errorFrame(sequence: sequence.next(), timestamp: unixSeconds()))
    }
}
