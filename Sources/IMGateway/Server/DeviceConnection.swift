import AsyncToolkit
import IMArchive
import IMWire
import Logging
import Mosquitto
import NIOCore

/// One TLV connection, as a channel handler on the connection's event loop: login, then chat,
/// receipts and deliveries through the device's MQTT session, until logout, drop, a deadline,
/// takeover, the broker's loss or shutdown.
///
/// Everything the connection decides is the pure ``ConnectionStateMachine``'s: this handler
/// turns each input into one of its events (a frame, the end of a read burst, writability,
/// its one timer, the channel closing, graceful shutdown, a batch of mail) and performs the
/// actions it returns (``run(_:)``); it reads and writes none of the machine's fields. Nothing
/// waits in a task while the device is idle (a connection costs its objects, not a task tree):
/// - frames are handled as they are read; what a read burst asks of the MQTT side goes there
///   at the end of the burst, in one visit to the MQTT loop, and its chats to ``ChatAcceptance``;
/// - everything that comes back (the login's outcome, the broker's messages, chat verdicts,
///   archive pages, token checks, answers to requests, the session's end) comes back through
///   the ``ConnectionMailbox``, the one way onto the event loop; ``MailboxWakeups`` drains the
///   mailboxes that one turn of the MQTT loop filled with one task per event loop;
/// - requests that wait for the broker's answer run in order on a request lane (a
///   ``SerialJobQueue``), a task that exists only while they do.
final class DeviceConnection: ChannelDuplexHandler {
    typealias InboundIn = IMFrame
    typealias OutboundIn = IMFrame
    /// Frames go out encoded (``write(_:)``): the frames of one turn in one buffer, one write.
    typealias OutboundOut = ByteBuffer

    let gateway: GatewayContext
    /// Where the device's chats go.
    let acceptance: ChatAcceptance
    var logger: ConnectionLogger
    /// The connection's state, its data path included: everything the handler does comes from it.
    var machine: ConnectionStateMachine
    /// The channel, between handlerAdded and handlerRemoved: the one writer of its frames, and
    /// the connection's one timer.
    var output: Output?
    /// The connection's place in the gateway's counts, and the promise of its end.
    var lifetime: ConnectionLifetime
    /// The one way back onto the event loop, from handlerAdded.
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
        var timer: Scheduled<Void>?
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
        gateway: GatewayContext, acceptance: ChatAcceptance, peer: String, clock: any ConnectionClock = SystemConnectionClock(),
        admission: ConnectionAdmissions.Ticket? = nil, transport: DeviceTransport = .tcp
    ) {
        self.gateway = gateway
        self.acceptance = acceptance
        self.logger = ConnectionLogger(gateway.logger, peer: peer)
        self.machine = ConnectionStateMachine(
            limits: .init(gateway.configuration, archiveEpoch: gateway.archive?.epoch.rawValue), clock: clock,
            statistics: gateway.statistics, transport: transport)
        self.lifetime = ConnectionLifetime(admission: admission, statistics: gateway.statistics, transport: transport)
    }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        output = Output(context: context)
        let loop = context.eventLoop
        let bound = NIOLoopBound(self, eventLoop: loop)
        let wakeups = gateway.wakeups
        let drain: @Sendable () -> Void = { bound.value.drainMailbox() }
        mailbox = ConnectionMailbox { wakeups.wake(on: loop, drain) }
        lifetime.opened(on: loop)
        run(machine.handle(.opened))
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        output?.timer?.cancel()
        output = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        run(machine.handle(.frame(unwrapInboundIn(data))))
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        run(machine.handle(.readComplete))
        flush()
        context.fireChannelReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        run(machine.handle(.writabilityChanged(context.channel.isWritable)))
        flush()
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        run(machine.handle(.channelClosed))
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            // Graceful shutdown, whether or not the device has logged in.
            run(machine.handle(.shutdown))
            flush()
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? IMWireError, error.isFatal {
            run(machine.handle(.malformed(error)))
        } else {
            logger.debug("connection dropped", metadata: ["error": "\(error)"])
            context.close(promise: nil)
        }
    }

    func read(context: ChannelHandlerContext) {
        // Backpressure (``ReadGate``): a device sending chat faster than the broker takes it
        // waits; a device that does not read what it is sent is not read either.
        run(machine.handle(.readRequested))
    }

    /// Takes the mailbox's batch (on the event loop).
    private func drainMailbox() {
        guard let mailbox else { return }
        run(machine.handle(.mail(mailbox.take())))
        flush()
    }

    private func timerFired() {
        output?.timer = nil
        run(machine.handle(.timerFired))
        flush()
    }

    // MARK: Actions

    /// Does what the machine said, in order; what an action learns at once (a group whose
    /// members are known) goes back to the machine after the rest.
    func run(_ actions: [ConnectionAction]) {
        var next: [ConnectionStateMachine.Event] = []
        for action in actions { perform(action, then: &next) }
        for event in next { run(machine.handle(event)) }
    }

    private func perform(_ action: ConnectionAction, then next: inout [ConnectionStateMachine.Event]) {
        switch action {
        case .write(let frame):
            write(frame)
        case .answerHello(let header, let sequence, let timestamp):
            write(IMMessage.helloOK(HelloOK(
                version: .current, features: Self.features(broker: gateway.brokerFit, archive: gateway.archive != nil),
                maxBodyLength: UInt32(gateway.configuration.limits.maxBodyLength), refSequence: header.sequence)
            ).frame(sequence: sequence, timestamp: timestamp, sessionID: header.sessionID))
        case .close(let farewell):
            close(after: farewell)
        case .read:
            output?.context.read()
        case .armTimer(let deadline):
            armTimer(deadline)
        case .cancelTimer:
            output?.timer?.cancel()
            output?.timer = nil
        case .startLogin(let request, let time):
            startLogin(request, within: time)
        case .abandonLogin:
            mailbox?.deviceLeft()
        case .sessionOpened(let opened):
            link = SessionLink(session: opened.session, registration: opened.registration, brokerFit: opened.brokerFit)
        case .loggedIn(let user, let device, let resumed):
            loggedIn(user: user, device: device, resumed: resumed)
        case .uplink(let work):
            guard let session = link?.session else { return }
            session.send(UplinkBatch(
                acknowledgements: work.acknowledgements,
                receipts: work.receipts.map { (session.receipt(.delivered, to: $0.sender, messageIDs: $0.ids), $0.ids[0]) },
                presenceAnswers: work.probes.map(session.presenceAnswer(to:))), logger: logger)
        case .accept(let chats):
            guard let session = link?.session, let mailbox else { return }
            for pending in chats {
                let ticket = pending.ticket
                acceptance.accept(pending.chat, via: session, logger: logger, stored: { mailbox.post(.ownStored($0)) }) {
                    mailbox.post(.chatAnswered(ticket, $0))
                }
            }
        case .lookUpGroup(let group):
            if let members = gateway.groups.knownMembers(of: group) {
                next.append(.mail([.groupResolved(group, .success(members))]))
            } else {
                lookUpGroup(group)
            }
        case .request(let job, let header):
            guard let link, let requests = link.requests else { return }
            link.lane.submit { await requests.run(job, header: header) }
        case .verifyToken(let token, let header):
            verifyToken(token, header)
        case .readArchive(let read):
            readArchive(read)
        case .readStreamBounds(let needsStart, let asked, let header):
            readStreamBounds(needsStart: needsStart, asked: asked, answering: header)
        case .savePosition(let offset, let promptly):
            guard let archive = gateway.archive, let session = link?.session else { return }
            archive.savePosition(DevicePosition(user: session.user, device: session.device, offset: offset), promptly: promptly)
        case .endSession(let reason):
            endSession(reason, then: &next)
        case .whenFinished(let promise):
            lifetime.whenFinished(promise)
        case .finish:
            mailbox?.close()
            link?.lane.close()
            lifetime.finish()
        case .log(let level, let message, let metadata):
            logger.log(level: level, message, metadata: metadata)
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

    /// LOGIN_OK was written: the counts, the log's names, the request lane's requests, and a
    /// resumed session's subscriptions and presence restored alongside the deliveries.
    private func loggedIn(user: String, device: String, resumed: Bool) {
        guard let session = link?.session, let brokerFit = link?.brokerFit, let mailbox else { return }
        logger.identify(user: user, device: device)
        link?.requests = DeviceRequests(
            session: session, context: gateway, acceptance: acceptance, brokerFit: brokerFit, mailbox: mailbox, logger: logger)
        lifetime.loggedIn()
        guard resumed else { return }
        // The broker kept the session (and its subscriptions); queued messages may hold our
        // writes until the device ACKs them, so this runs alongside deliveries.
        let logger = self.logger
        let probe = gateway.configuration.broker.presenceProbe
        link?.lane.submit {
            do {
                try await session.subscribeAndAnnounce(probeOwnDevices: probe)
            } catch MosquittoError.closed, MosquittoError.connectionLost {
                // The session ended meanwhile (logout, drop, shutdown), or the MQTT
                // connection did, which closes the device's connection on its own.
                logger.debug("subscriptions not restored: the session ended")
            } catch {
                mailbox.post(.sessionFailed("\(error)"))
            }
        }
    }

    /// Ends the device's MQTT session the way `reason` says; `sessionEnded` comes back as mail.
    private func endSession(_ reason: ConnectionStateMachine.CloseReason, then next: inout [ConnectionStateMachine.Event]) {
        guard let link, let mailbox else {
            // Nothing to end (a login that never opened one): done at once.
            next.append(.mail([.sessionEnded]))
            return
        }
        link.lane.close()
        if link.requests != nil { lifetime.loggedOut() }
        logger.info("session ended", metadata: ["reason": "\(reason)"])
        let session = link.session
        let registry = gateway.registry
        let registration = link.registration
        Task {
            await session.end(reason)
            await registry.unregister(user: session.user, device: session.device, id: registration)
            mailbox.post(.sessionEnded)
        }
    }

    // MARK: Background work (its outcome comes back as mail)

    /// Looks `group`'s members up off the event loop.
    private func lookUpGroup(_ group: String) {
        guard let mailbox else { return }
        let groups = gateway.groups
        Task {
            let members: Result<[String: UInt64], any Error>
            do { members = .success(try await groups.members(of: group)) } catch { members = .failure(error) }
            mailbox.post(.groupResolved(group, members))
        }
    }

    /// Reads `read` from the device's stream.
    private func readArchive(_ read: StreamSync.Read) {
        guard let archive = gateway.archive, let session = link?.session, let mailbox else { return }
        let stream = session.user
        Task {
            let result: Result<[StoredEntry], ArchiveError>
            do throws(ArchiveError) {
                result = .success(try await archive.read(stream: stream, after: read.after, through: read.through, limit: read.limit))
            } catch {
                result = .failure(error)
            }
            mailbox.post(.page(result, read))
        }
    }

    /// Reads the stream's end (and the device's saved position, when the start is not known).
    private func readStreamBounds(needsStart: Bool, asked: StreamPosition?, answering header: IMFrameHeader?) {
        guard let archive = gateway.archive, let session = link?.session, let mailbox else { return }
        let (user, device) = (session.user, session.device)
        Task {
            let found: Result<(StreamBounds, UInt64?), ArchiveError>
            do throws(ArchiveError) {
                let stored = needsStart ? try await archive.position(user: user, device: device) : nil
                found = .success((try await archive.bounds(of: user), stored))
            } catch {
                found = .failure(error)
            }
            mailbox.post(.bounds(found, asked: asked, answering: header))
        }
    }

    // MARK: The timer

    /// Arms the one timer for `deadline` (the machine asks only when it comes sooner).
    private func armTimer(_ deadline: NIODeadline) {
        guard let context = output?.context else { return }
        output?.timer?.cancel()
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        output?.timer = context.eventLoop.scheduleTask(deadline: deadline) { bound.value.timerFired() }
    }

    // MARK: Writing

    private func write(_ frame: IMFrame) {
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

    private func flush() {
        guard let context = output?.context, let pending = output?.pending.take() else { return }
        context.writeAndFlush(wrapOutboundOut(pending), promise: nil)
    }

    /// Writes `farewell` (after what is pending) and closes the channel once it is out.
    private func close(after farewell: IMFrame?) {
        guard let context = output?.context else { return }
        if let farewell { write(farewell) }
        let last = output?.pending.take() ?? context.channel.allocator.buffer(capacity: 0)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(last)).whenComplete { _ in channel.close(promise: nil) }
    }
}
