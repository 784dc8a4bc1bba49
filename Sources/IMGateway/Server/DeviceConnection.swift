import Foundation
import IMWire
import Logging
import Mosquitto
import NIOCore

/// One TLV connection, as a channel handler on the connection's event loop: login, then
/// chat, receipts and deliveries through the device's MQTT session, until logout, drop,
/// timeout, takeover or shutdown.
///
/// The connection's life is the pure ``ConnectionStateMachine``: this handler feeds it
/// events and performs the actions it returns. Nothing waits in a task while the device
/// is idle (a connection costs its objects, not a task tree):
/// - frames are handled as they are read; what a read burst asks of the MQTT client (chat
///   publishes, acknowledgements of deliveries, "delivered" receipts) goes to the MQTT loop
///   in one ``MosquittoClient/perform(_:)`` at the end of the burst;
/// - what the MQTT side produces (messages, publish outcomes, the loss of the connection)
///   comes back through a ``ConnectionMailbox``, one event-loop hop per batch;
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

    // Login.
    /// The LOGIN's header: LOGIN_OK refers to it, and what the gateway sends on its own
    /// carries its session id (PROTOCOL.md 5.1).
    var loginHeader: IMFrameHeader?
    /// The device's MQTT session, once the login opened it.
    var session: DeviceSession?
    var registration: UInt64?
    var resumed = false
    /// The text of the ERROR or KICK the next close sends, when there is more to say than
    /// the code.
    var closeMessage: String?

    // Logged in.
    var sessionID: UInt16 = 0
    var mailbox: ConnectionMailbox?
    let deliveries = PendingDeliveries()
    var downlink = DownlinkQueue<DownlinkEntry>()
    let lane = RequestLane()
    var requests: DeviceRequests?
    /// Mail that arrived before LOGIN_OK was written.
    var early: [ConnectionMailbox.Mail] = []
    /// Chat messages waiting to be handed to the MQTT client, in order.
    var chatsToStart = FIFO<ChatStart>()
    /// MQTT deliveries the device (or the gateway) is done with, gathered in this burst.
    var acknowledgements: [UInt64] = []
    /// ACKed chat deliveries whose "delivered" receipt is not published yet.
    var delivered: [PendingDeliveries.Origin] = []
    /// Set while `delivered` waits for ``receiptWindow`` to pass.
    var receiptTimer: Scheduled<Void>?
    /// Chat messages handed to the MQTT client and not settled yet (at most
    /// `broker.max_inflight`: libmosquitto searches its in-flight list linearly).
    var chatsInFlight = 0
    /// A read was held back while too many chats were waiting.
    var readPending = false
    var watch: UInt64?
    var locationLimiter: RateLimiter

    // Ending.
    /// Completed once the connection is finished: channel closed, MQTT session ended.
    var finished: EventLoopPromise<Void>?
    var sessionEnding = false
    var finishedWithoutSession = false
    var countedLoggedIn = false

    /// How long "delivered" receipts are gathered before they are published (one MQTT
    /// message per sender for all of them), unless ``receiptBatch`` are waiting first. A
    /// receipt is not urgent, and one per read burst of a busy device cost a fifth of the
    /// gateway's CPU; but a large batch arrives at the sender's connection as one burst of
    /// work that delays its chat ACKs (50 ms and 256 put p99 at 5k msg/s at 1.5-2 ms).
    static let receiptWindow: TimeAmount = .milliseconds(10)
    static let receiptBatch = 64

    /// Past this many chat messages of one device waiting for the broker, the connection
    /// stops reading until the broker catches up. Far above what a well-behaved device has
    /// unACKed: while it does not read, the device's ACKs wait too, and under ack-through
    /// the session's publishes may wait for those.
    static let maxWaitingChats = 4096

    /// A frame for the device, queued by priority (``DownlinkQueue``).
    struct DownlinkEntry {
        var message: IMMessage
        /// The MQTT delivery to acknowledge when the device ACKs this frame.
        var deliveryID: UInt64?
        /// For a chat delivery: whom to send the "delivered" receipt.
        var origin: PendingDeliveries.Origin?
    }

    /// A chat message ready to publish, and what its ACK needs.
    struct ChatStart: Sendable {
        var publish: DeviceSession.OutgoingPublish
        var ticket: ConnectionMailbox.ChatTicket
    }

    init(gateway: GatewayContext, sequence: OutboundSequence, peer: String) {
        self.gateway = gateway
        self.sequence = sequence
        var logger = gateway.logger
        logger[metadataKey: "peer"] = "\(peer)"
        self.logger = logger
        let now = Date.now.timeIntervalSince1970
        self.machine = ConnectionStateMachine(loginDeadline: now + Double(gateway.configuration.limits.loginTimeout))
        let location = gateway.configuration.location
        self.locationLimiter = RateLimiter(ratePerSecond: location.maxUpdatesPerSecond, burst: max(1, location.maxUpdatesPerSecond))
    }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        channelContext = context
        let loop = context.eventLoop
        let bound = NIOLoopBound(self, eventLoop: loop)
        mailbox = ConnectionMailbox { loop.execute { bound.value.drainMailbox() } }
        let finished = loop.makePromise(of: Void.self)
        self.finished = finished
        let connections = gateway.statistics.connections
        connections.enter()
        finished.futureResult.whenComplete { _ in connections.leave() }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
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
            } else {
                // Well framed, not a valid message: refuse it, stay open.
                write(Ack.refusing(sequence: frame.header.sequence, code: error.errorCode, message: "\(error)").frame(
                    timestamp: unixSeconds(), sessionID: frame.header.sessionID))
            }
            return
        }
        perform(machine.handle(.frameReceived(Self.kind(of: message))), frame: frame, message: message)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        startUplink()
        flushIfNeeded()
        context.fireChannelReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            writeDownlink()
            flushIfNeeded()
            resumeReading()
        }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        perform(machine.handle(.channelClosed))
        finishIfDone()
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
        } else if let error = error as? GatewayError {
            // The timeout handler said why and closes the connection itself.
            logger.info("connection closed", metadata: ["reason": "\(error)"])
        } else {
            logger.debug("connection dropped", metadata: ["error": "\(error)"])
            context.close(promise: nil)
        }
    }

    func read(context: ChannelHandlerContext) {
        // Backpressure: a device sending chat faster than the broker takes it waits (its
        // ACKs wait too, which is why the bound is far above what ack-through can hold); a
        // device that does not read what it is sent is not read either, so that the replies
        // to its requests cannot pile up in the outbound buffer. (Not reading, it sends no
        // heartbeat that arrives: the idle timeout ends it if it never reads again.)
        if chatsToStart.count >= Self.maxWaitingChats || !context.channel.isWritable {
            readPending = true
        } else {
            context.read()
        }
    }

    /// Reads again after ``read(context:)`` held back, once neither reason holds.
    func resumeReading() {
        guard readPending, chatsToStart.count < Self.maxWaitingChats, let context = channelContext, context.channel.isWritable else { return }
        readPending = false
        context.read()
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
                version: .current, features: [.zlib, .qos2Chat, .receipts, .presence, .location, .pubSub],
                maxBodyLength: UInt32(gateway.configuration.limits.maxBodyLength), refSequence: frame.header.sequence)),
                sessionID: frame.header.sessionID)
        case .startLogin:
            guard let frame, case .login(let request) = message else { return }
            startLogin(request, header: frame.header)
        case .completeLogin:
            completeLogin()
        case .handleFrame:
            guard let frame, let message else { return }
            handleRequest(message, frame)
        case .reject(let code):
            guard let frame else { return }
            write(Ack.refusing(sequence: frame.header.sequence, code: code, message: code == .notLoggedIn ? "log in first" : nil)
                .frame(timestamp: unixSeconds(), sessionID: frame.header.sessionID))
        case .sendErrorAndClose(let code):
            let message = closeMessage ?? "\(code)"
            closeMessage = nil
            // A refused LOGIN is answered like a reply to it (REF_SEQUENCE, its session id).
            let refused = code != .brokerUnavailable ? loginHeader : nil
            writeThenClose(IMMessage.error(ErrorNotice(code: code, message: message, refSequence: refused?.sequence))
                .frame(sequence: sequence.next(), timestamp: unixSeconds(), sessionID: refused?.sessionID ?? sessionID))
        case .kickAndClose(let code):
            let message = closeMessage ?? Self.kickText(code)
            closeMessage = nil
            sendThenClose(.kick(Kick(reason: code, message: message)))
        case .acknowledgeAndClose:
            guard let frame else { return }
            writeThenClose(Ack(sequence: frame.header.sequence).frame(timestamp: unixSeconds(), sessionID: frame.header.sessionID))
        case .endSession(let reason):
            endSession(reason)
        }
    }

    static func kickText(_ code: IMErrorCode) -> String {
        switch code {
        case .sessionTakenOver: "logged in elsewhere"
        case .serverShuttingDown: "gateway shutting down"
        default: "\(code)"
        }
    }

    /// A newer login of this device, or the gateway shutting down: KICK, close, end the
    /// MQTT session as `how` says. The future completes once the session has ended.
    func leave(_ how: DeviceSession.Ending) -> EventLoopFuture<Void> {
        perform(machine.handle(how == .takenOver ? .takenOver : .shutdown))
        flushIfNeeded()
        finishIfDone()
        return finished!.futureResult
    }

    /// Under ack-through a device that stops ACKing holds its session's writes: past the
    /// delivery ACK timeout the connection is dropped, and the broker redelivers what it
    /// did not ACK when the device comes back.
    func deliveryOverdue(_ age: Duration) {
        guard machine.state == .loggedIn else { return }
        logger.notice("delivery not ACKed in time: closing", metadata: ["waited": "\(age)"])
        // The KICK's text: IDLE_TIMEOUT also means plain silence ("nothing received for ...").
        closeMessage = "delivery not acknowledged within \(gateway.configuration.limits.deliveryAckTimeout) s"
        perform(machine.handle(.idleTimeout))
    }

    /// Ends the device's MQTT session the way `reason` says, once.
    func endSession(_ reason: ConnectionStateMachine.CloseReason) {
        guard let session, !sessionEnding else { return }
        // What the device ACKed goes first: acknowledgements and "delivered" receipts.
        receiptTimer?.cancel()
        receiptTimer = nil
        startUplink(receiptsDue: true)
        sessionEnding = true
        mailbox?.close()
        lane.close()
        if let watch { gateway.deliveryWatchdog.forget(watch) }
        if countedLoggedIn {
            countedLoggedIn = false
            gateway.statistics.loggedIn.subtract(1, ordering: .relaxed)
        }
        let how: DeviceSession.Ending = switch reason {
        case .logout: .logout
        case .takenOver: .takenOver
        case .shutdown: .shutdown
        case .loginTimeout, .loginFailed, .idleTimeout, .tokenExpired, .connectionLost: .dropped
        }
        logger.info("session ended", metadata: ["how": "\(how)"])
        let registry = gateway.registry
        let registration = self.registration
        let finished = self.finished
        Task {
            await session.end(how)
            if let registration { await registry.unregister(user: session.user, device: session.device, id: registration) }
            finished?.succeed(())
        }
    }

    /// Completes `finished` once the channel is closed and nothing is left to end.
    func finishIfDone() {
        guard machine.state == .closed, !machine.loginPending, !sessionEnding, !finishedWithoutSession else { return }
        finishedWithoutSession = true
        mailbox?.close()
        lane.close()
        finished?.succeed(())
    }

    // MARK: Writing

    func write(_ frame: IMFrame) {
        channelContext?.write(wrapOutboundOut(frame), promise: nil)
        needsFlush = true
    }

    /// Sends a message with the next sequence number.
    func send(_ message: IMMessage, sessionID: UInt16? = nil) {
        write(message.frame(sequence: sequence.next(), timestamp: unixSeconds(), sessionID: sessionID ?? self.sessionID))
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

    func sendThenClose(_ message: IMMessage) {
        writeThenClose(message.frame(sequence: sequence.next(), timestamp: unixSeconds(), sessionID: sessionID))
    }

    /// The stream is no longer framed: say why, then close.
    func closeOnMalformedFrame(_ error: IMWireError) {
        logger.notice("closing on a malformed frame", metadata: ["error": "\(error)"])
        writeThenClose(error.errorFrame(sequence: sequence.next(), timestamp: unixSeconds()))
    }
}
