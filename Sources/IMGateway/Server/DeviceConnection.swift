import AsyncToolkit
import Foundation
import IMWire
import Logging
import Mosquitto
import NIOCore

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
///   receipts) run in order on a request lane (a ``SerialJobQueue``), a task that exists only while they do,
///   and their answers come back as mail;
/// - the login (token, MQTT connect, subscriptions) runs on a task of its own, once, and
///   so do reads of the archive and token refreshes; each comes back to the event loop as
///   an event, so the handler, on its event loop, is the channel's one writer.
final class DeviceConnection: ChannelDuplexHandler {
    typealias InboundIn = IMFrame
    typealias OutboundIn = IMFrame
    /// Frames go out encoded (``write(_:)``): the frames of one turn in one buffer, one write.
    typealias OutboundOut = ByteBuffer

    let gateway: GatewayContext
    /// Where the device's chats go (``ChatAcceptance``).
    let acceptance: ChatAcceptance
    var logger: ConnectionLogger
    /// The connection's state, its data path included: everything the handler decides by.
    var machine: ConnectionStateMachine
    /// The channel, between handlerAdded and handlerRemoved: the one writer of its frames, and
    /// the connection's one timer.
    var output: Output?
    /// The connection's place in the gateway's counts, and the promise of its end.
    var lifetime: ConnectionLifetime
    /// What the MQTT side, the archive and the request lane hand the connection, from
    /// handlerAdded.
    var mailbox: ConnectionMailbox?
    /// The device's MQTT session, once the login opened it.
    var link: SessionLink?

    /// The channel's context, the frames written since the last flush, the timer.
    struct Output {
        let context: ChannelHandlerContext
        /// The frames written since the last flush, encoded one after the other: they leave
        /// as one write (nothing is kept between turns).
        var pending: ByteBuffer?
        /// The one timer, armed for the machine's next deadline.
        var timer: (task: Scheduled<Void>, deadline: NIODeadline)?
    }

    /// The device's MQTT session and what serves it.
    struct SessionLink {
        let session: any DeviceSession
        /// Its place in the gateway's ``SessionRegistry``.
        let registration: UInt64
        /// What the session's CONNACK made of the broker.
        let brokerFit: BrokerFit
        /// The requests that wait for the broker's answer, from LOGIN_OK.
        var requests: DeviceRequests?
        /// Where those requests run, one after the other.
        let lane = SerialJobQueue()
    }

    init(
        gateway: GatewayContext, acceptance: ChatAcceptance, peer: String, now: NIODeadline, admission: ConnectionAdmissions.Ticket? = nil,
        transport: DeviceTransport = .tcp
    ) {
        self.gateway = gateway
        self.acceptance = acceptance
        self.logger = ConnectionLogger(gateway.logger, peer: peer)
        let limits = gateway.configuration.limits
        self.machine = ConnectionStateMachine(
            limits: .init(
                loginTimeout: .seconds(Int64(limits.loginTimeout)), idleTimeout: .seconds(Int64(limits.idleTimeout)),
                deliveryAckTimeout: .seconds(Int64(limits.deliveryAckTimeout)),
                tokenLeeway: .seconds(Int64(gateway.configuration.auth.leeway)),
                maxInFlight: gateway.configuration.broker.maxInflight, chatRate: limits.chatRate, chatBurst: limits.chatBurst,
                locationRate: gateway.configuration.location.maxUpdatesPerSecond),
            now: now)
        self.lifetime = ConnectionLifetime(admission: admission, statistics: gateway.statistics, transport: transport)
    }

    /// The session, once the login opened it.
    var session: (any DeviceSession)? { link?.session }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        output = Output(context: context)
        let loop = context.eventLoop
        let bound = NIOLoopBound(self, eventLoop: loop)
        let wakeups = gateway.wakeups
        let drain: @Sendable () -> Void = { bound.value.drainMailbox() }
        mailbox = ConnectionMailbox { wakeups.wake(on: loop, drain) }
        lifetime.opened(on: loop)
        armTimer()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        cancelTimer()
        output = nil
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
        startUplink(now: context.eventLoop.now)
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
        mailbox?.deviceLeft()
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
        case .handleFrame:
            guard let frame, let message else { return }
            handleRequest(message, frame)
        case .reject(let code, let text):
            guard let frame else { return }
            write(Ack.refusing(sequence: frame.header.sequence, code: code, message: text)
                .frame(timestamp: unixSeconds(), sessionID: frame.header.sessionID))
        case .completeLogin(let grant):
            completeLogin(grant)
        case .close(let farewell):
            close(with: farewell)
        case .endSession(let reason):
            endSession(reason)
        case .finish:
            mailbox?.close()
            link?.lane.close()
            lifetime.finish()
        case .resumeReading:
            output?.context.read()
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
                .frame(sequence: machine.nextSequence(), timestamp: unixSeconds(), sessionID: sessionID)
        case .kick(let code, let text):
            logger.info("kicked", metadata: ["code": "\(code)", "reason": "\(text)"])
            frame = IMMessage.kick(Kick(reason: code, message: text))
                .frame(sequence: machine.nextSequence(), timestamp: unixSeconds(), sessionID: machine.sessionID)
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
        return lifetime.finished()
    }

    /// Ends the device's MQTT session the way `reason` says; reports `sessionEnded`.
    func endSession(_ reason: ConnectionStateMachine.CloseReason) {
        guard let link, let loop = lifetime.eventLoop else {
            // Nothing to end (the machine only asks once a login opened one): done at once.
            perform(machine.handle(.sessionEnded))
            return
        }
        let session = link.session
        // What the device ACKed goes first: acknowledgements and "delivered" receipts; its
        // position is saved.
        closeArchiveLink()
        startUplink(now: loop.now, ending: true)
        mailbox?.close()
        link.lane.close()
        if link.requests != nil { lifetime.loggedOut() }
        logger.info("session ended", metadata: ["reason": "\(reason)"])
        let registry = gateway.registry
        let registration = link.registration
        let bound = NIOLoopBound(self, eventLoop: loop)
        Task {
            await session.end(reason)
            await registry.unregister(user: session.user, device: session.device, id: registration)
            loop.execute { bound.value.perform(bound.value.machine.handle(.sessionEnded)) }
        }
    }

    // MARK: The timer

    /// Keeps the one timer armed for the machine's next deadline. A timer that fires
    /// before the deadline moved later re-arms (a frame pushes the idle deadline back
    /// without touching the timer).
    func armTimer() {
        guard let context = output?.context, let deadline = machine.nextDeadline else {
            cancelTimer()
            return
        }
        if let armed = output?.timer?.deadline, armed <= deadline { return }
        output?.timer?.task.cancel()
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        output?.timer = (context.eventLoop.scheduleTask(deadline: deadline) { bound.value.timerFired() }, deadline)
    }

    private func timerFired() {
        output?.timer = nil
        guard let context = output?.context else { return }
        let now = context.eventLoop.now
        perform(machine.handle(.timerFired(now: now)))
        // The data path's deadlines: receipts gathered for their window, the archive's timer.
        startUplink(now: now)
        if machine.archiveTimerDue(now: now) { archiveTimerFired(now: now) }
        // The machine's next deadline is what its timer event checks: one that has passed
        // has been acted on (else this would fire again at once, for ever).
        assert(machine.nextDeadline.map { $0 > now } ?? true, "a deadline passed and the machine did nothing")
        flushIfNeeded()
        armTimer()
    }

    private func cancelTimer() {
        output?.timer?.task.cancel()
        output?.timer = nil
    }

    // MARK: Writing

    func write(_ frame: IMFrame) {
        guard let context = output?.context else { return }
        // Taken out while it grows: a copy left behind would make it copy its storage.
        var buffer = output?.pending.take() ?? context.channel.allocator.buffer(capacity: 256)
        defer { if buffer.readableBytes > 0 { output?.pending = buffer } }
        do {
            try IMFrameEncoder(maxBodyLength: gateway.configuration.limits.maxBodyLength).encode(data: frame, out: &buffer)
        } catch {
            // Nothing was appended (the length is checked first). Only a frame this gateway
            // built can get here: one over the body limit.
            logger.error("a frame could not be encoded: not sent", metadata: ["error": "\(error)", "type": "\(frame.header.type)"])
        }
    }

    /// Sends a message with the next sequence number.
    func send(_ message: IMMessage, sessionID: UInt16? = nil) {
        write(message.frame(sequence: machine.nextSequence(), timestamp: unixSeconds(), sessionID: sessionID ?? machine.sessionID))
    }

    func flushIfNeeded() {
        guard let context = output?.context, let pending = output?.pending.take() else { return }
        context.writeAndFlush(wrapOutboundOut(pending), promise: nil)
    }

    /// Writes `frame` (after what is pending) and closes the channel once it is out.
    func writeThenClose(_ frame: IMFrame) {
        guard let context = output?.context else { return }
        write(frame)
        let last = output?.pending.take() ?? context.channel.allocator.buffer(capacity: 0)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(last)).whenComplete { _ in channel.close(promise: nil) }
    }

    /// The stream is no longer framed: say why, then close.
    func closeOnMalformedFrame(_ error: IMWireError) {
        logger.notice("closing on a malformed frame", metadata: ["error": "\(error)"])
        cancelTimer()
        writeThenClose(error.errorFrame(sequence: machine.nextSequence(), timestamp: unixSeconds()))
    }
}
