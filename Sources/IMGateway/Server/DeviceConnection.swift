import Foundation
import IMWire
import Logging
import Mosquitto
import NIOCore
import Synchronization

/// One TLV connection: login, then chat, receipts and deliveries through the device's
/// MQTT session, until logout, drop, timeout, takeover or shutdown.
struct DeviceConnection {
    let channel: NIOAsyncChannel<IMFrame, IMFrame>
    let sequence: OutboundSequence
    let context: GatewayContext
    var logger: Logger

    init(channel: NIOAsyncChannel<IMFrame, IMFrame>, sequence: OutboundSequence, context: GatewayContext) {
        self.channel = channel
        self.sequence = sequence
        self.context = context
        var logger = context.logger
        logger[metadataKey: "peer"] = "\(channel.channel.remoteAddress?.description ?? "?")"
        self.logger = logger
    }

    func run() async {
        context.statistics.connections.add(1, ordering: .relaxed)
        defer { context.statistics.connections.subtract(1, ordering: .relaxed) }
        do {
            try await channel.executeThenClose { inbound, outbound in
                let writer = FrameWriter(outbound: outbound, sequence: sequence)
                var frames = inbound.makeAsyncIterator()
                do {
                    guard let identity = try await login(&frames, writer) else { return }
                    try await serve(identity, &frames, writer)
                } catch let error as IMWireError where error.isFatal {
                    // The stream is no longer framed: say why, then close.
                    logger.notice("closing on a malformed frame", metadata: ["error": "\(error)"])
                    try? await writer.write(error.errorFrame(sequence: sequence.next(), timestamp: unixSeconds()))
                }
            }
        } catch let error as GatewayError {
            logger.info("connection closed", metadata: ["reason": "\(error)"])
        } catch {
            logger.debug("connection ended", metadata: ["error": "\(error)"])
        }
    }

    // MARK: Login

    struct Identity: Sendable {
        var user: String
        var device: String
        /// The LOGIN frame's header (the body dropped): LOGIN_OK refers to it, and what the
        /// gateway sends on its own carries its session id (PROTOCOL.md 5.1).
        var login: IMFrame? = nil
    }

    /// Answers heartbeats and HELLO until a LOGIN arrives; verifies its token. Returns nil
    /// when the connection ended or the login was refused (refusal sent, then close).
    private func login(_ frames: inout NIOAsyncChannelInboundStream<IMFrame>.AsyncIterator, _ writer: FrameWriter) async throws -> Identity? {
        while let frame = try await frames.next() {
            guard let message = try await decodeOrRefuse(frame, writer) else { continue }
            switch message {
            case .heartbeat:
                try await writer.write(IMFrame.heartbeatReply(to: frame, timestamp: unixSeconds())!)
            case .hello(let hello):
                try await writer.send(.helloOK(helloOK(hello, frame)), replyingTo: frame)
            case .ack:
                continue
            case .login(let request):
                switch await authenticate(request) {
                case .success(var identity):
                    // Only the header is needed later: a body would keep the whole read
                    // buffer it is a slice of alive for the session (~2 KiB per device).
                    identity.login = IMFrame(header: frame.header, body: ByteBuffer())
                    return identity
                case .failure(let refusal):
                    logger.notice("login refused", metadata: ["error": "\(refusal.message)"])
                    try await writer.send(
                        .error(ErrorNotice(code: refusal.code, message: refusal.message, refSequence: frame.header.sequence)), replyingTo: frame)
                    return nil
                }
            default:
                try await writer.write(Ack.refusing(sequence: frame.header.sequence, code: .notLoggedIn, message: "log in first").frame(
                    timestamp: unixSeconds(), sessionID: frame.header.sessionID))
            }
        }
        return nil
    }

    struct Refusal: Error {
        var code: IMErrorCode
        var message: String
    }

    /// Verifies the token; the device id comes from the LOGIN frame, else the token, else
    /// "default", and must match the token's when both say.
    private func authenticate(_ request: LoginRequest) async -> Result<Identity, Refusal> {
        let device: AuthenticatedDevice
        do {
            device = try await context.verifier.verify(request.token)
        } catch {
            return .failure(Refusal(code: error.errorCode, message: "\(error)"))
        }
        let deviceID = request.deviceID ?? device.deviceID ?? "default"
        do {
            try IMIdentifier.validate(deviceID, kind: .device)
        } catch {
            return .failure(Refusal(code: .invalidUserID, message: "\(error)"))
        }
        if let claimed = device.deviceID, claimed != deviceID {
            return .failure(Refusal(code: .forbidden, message: "the token is for device \(claimed), not \(deviceID)"))
        }
        return .success(Identity(user: device.userID, device: deviceID))
    }

    /// The message in `frame`; a frame that is well framed but not a valid message gets a
    /// negative ACK (and nil), a framing error is thrown (the connection closes).
    private func decodeOrRefuse(_ frame: IMFrame, _ writer: FrameWriter) async throws -> IMMessage? {
        switch Result(catching: { () throws(IMWireError) -> IMMessage in try IMMessage(frame: frame) }) {
        case .success(let message):
            return message
        case .failure(let error):
            if error.isFatal { throw error }
            try await writer.write(Ack.refusing(sequence: frame.header.sequence, code: error.errorCode, message: "\(error)").frame(
                timestamp: unixSeconds(), sessionID: frame.header.sessionID))
            return nil
        }
    }

    private func helloOK(_ hello: Hello, _ frame: IMFrame) -> HelloOK {
        HelloOK(
            version: .current, features: [.zlib, .qos2Chat, .receipts, .presence, .location, .pubSub],
            maxBodyLength: UInt32(context.configuration.limits.maxBodyLength), refSequence: frame.header.sequence)
    }

    // MARK: Logged in

    private func serve(_ identity: Identity, _ frames: inout NIOAsyncChannelInboundStream<IMFrame>.AsyncIterator, _ anyWriter: FrameWriter) async throws {
        var loggedInWriter = anyWriter
        loggedInWriter.sessionID = identity.login?.header.sessionID ?? 0
        let writer = loggedInWriter
        var sessionLogger = self.logger
        sessionLogger[metadataKey: "user"] = "\(identity.user)"
        sessionLogger[metadataKey: "device"] = "\(identity.device)"
        let logger = sessionLogger
        let session = DeviceSession(user: identity.user, device: identity.device, context: context)
        let ending = EndingRecord()
        let channel = self.channel.channel
        let registration = await context.registry.register(user: identity.user, device: identity.device) { how in
            // A newer login of this device, or the gateway shutting down: tell the
            // device, end the MQTT side as `how` says, close.
            guard ending.claim(how) else { return }
            let reason: IMErrorCode = how == .takenOver ? .sessionTakenOver : .serverShuttingDown
            try? await writer.send(.kick(Kick(reason: reason, message: how == .takenOver ? "logged in elsewhere" : "gateway shutting down")))
            await session.end(how)
            try? await channel.close()
        }
        defer { Task { [context] in await context.registry.unregister(user: identity.user, device: identity.device, id: registration) } }

        let resumed: Bool
        do {
            resumed = try await session.connect()
            if !resumed {
                // A new session has nothing queued: subscribe before LOGIN_OK, so nothing
                // sent to the device after its login can miss it.
                try await session.subscribeAndAnnounce()
            }
        } catch {
            logger.error("cannot open the MQTT session", metadata: ["error": "\(error)", "broker": "\(context.broker)"])
            try? await writer.send(.error(ErrorNotice(code: .brokerUnavailable, message: "\(error)")))
            await session.end(.takenOver)
            return
        }
        try await writer.send(.loginOK(LoginOK(
            userID: identity.user, deviceID: identity.device, serverTime: unixMilliseconds(),
            heartbeatInterval: UInt16(clamping: context.configuration.limits.idleTimeout / 3),
            refSequence: identity.login?.header.sequence)), replyingTo: identity.login)
        channel.pipeline.fireUserInboundEventTriggered(ConnectionTimeoutHandler.LoggedIn())
        context.statistics.loggedIn.add(1, ordering: .relaxed)
        defer { context.statistics.loggedIn.subtract(1, ordering: .relaxed) }
        logger.info("logged in")

        let deliveries = PendingDeliveries()
        let downlink = Downlink()
        let (uplink, uplinkSink) = AsyncStream.makeStream(of: UplinkJob.self)
        let chatAcks = BatchingQueue<InFlight>()
        await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await downlink.run(writer, sequence: sequence, deliveries: deliveries) }
            group.addTask { try await deliver(session, downlink) }
            if resumed { group.addTask {
                // The broker kept the session (and its subscriptions); queued messages may
                // hold our writes until the device ACKs them, so this runs alongside.
                do {
                    try await session.subscribeAndAnnounce()
                } catch {
                    logger.error("cannot subscribe or announce presence", metadata: ["error": "\(error)"])
                    try? await writer.send(.error(ErrorNotice(code: .brokerUnavailable, message: "\(error)")))
                    try? await channel.close()
                }
            } }
            group.addTask {
                defer { chatAcks.finish() }
                try await publishInOrder(uplink, session, writer, deliveries, chatAcks)
            }
            group.addTask { try await acknowledgeChats(chatAcks, session, writer) }
            // A device that stops ACKing holds its session's writes (ack-through): past the
            // delivery ACK timeout the connection is dropped, and the broker redelivers
            // what it did not ACK when the device comes back.
            let watch = context.deliveryWatchdog.watch(deliveries) { [logger] age in
                logger.notice("delivery not ACKed in time: closing", metadata: ["waited": "\(age)"])
                Task {
                    let timeout = context.deliveryWatchdog.timeout
                    try? await writer.send(.kick(Kick(reason: .idleTimeout, message: "delivery not acknowledged within \(timeout)")))
                    try? await channel.close()
                }
            }
            defer { context.deliveryWatchdog.forget(watch) }
            group.addTask {
                // The MQTT connection ending (broker gone, session taken over at the
                // broker) ends the device connection: the device reconnects.
                for await event in session.client.events {
                    if case .disconnected(let reason) = event {
                        if ending.current == nil {
                            logger.warning("MQTT session lost", metadata: ["reason": "\(reason)"])
                            try? await writer.send(.error(ErrorNotice(code: .brokerUnavailable, message: "\(reason)")))
                            try? await channel.close()
                        }
                        return
                    }
                }
            }
            defer {
                uplinkSink.finish()
                downlink.finish()
            }
            do {
                while let frame = try await frames.next() {
                    if try await handle(frame, identity, session, deliveries, writer, uplinkSink) == .logout {
                        _ = ending.claim(.logout)
                        break
                    }
                }
            } catch let error as GatewayError {
                logger.info("closing", metadata: ["reason": "\(error)"])
            } catch let error as IMWireError where error.isFatal {
                logger.notice("closing on a malformed frame", metadata: ["error": "\(error)"])
                try? await writer.write(error.errorFrame(sequence: sequence.next(), timestamp: unixSeconds()))
            } catch {
                logger.debug("connection dropped", metadata: ["error": "\(error)"])
            }
            let first = ending.claim(.dropped) || ending.current == .logout
            let how = ending.current ?? .dropped
            group.cancelAll()
            if first {
                // (takeover and shutdown end the session in their `leave` closure)
                await session.end(how)
            }
            if how == .logout { try? await channel.close() }
            logger.info("session ended", metadata: ["how": "\(how)"])
        }
    }

    private enum Outcome { case handled, logout }

    private func handle(
        _ frame: IMFrame, _ identity: Identity, _ session: DeviceSession, _ deliveries: PendingDeliveries,
        _ writer: FrameWriter, _ uplink: AsyncStream<UplinkJob>.Continuation
    ) async throws -> Outcome {
        guard let message = try await decodeOrRefuse(frame, writer) else { return .handled }
        switch message {
        case .heartbeat:
            try await writer.write(IMFrame.heartbeatReply(to: frame, timestamp: unixSeconds())!)
        case .ack(let ack):
            if let (deliveryID, origin) = deliveries.remove(ack.sequence) {
                await session.client.acknowledge(deliveryID: deliveryID)
                if let origin, deliveries.noteDelivered(origin) {
                    // The first of a run: the uplink worker takes every one noted until it
                    // gets there, one receipt publish per sender.
                    uplink.yield(.delivered)
                }
            }
        case .chat(let chat):
            context.statistics.messagesIn.add(1, ordering: .relaxed)
            do {
                try IMIdentifier.validate(chat.to, kind: .user)
            } catch {
                try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .invalidUserID, message: "\(error)"), to: frame)
                return .handled
            }
            uplink.yield(.chat(chat, frame))
        case .readReceipt(let receipt):
            uplink.yield(.receipt(receipt, frame))
        case .presenceWatch(let watch):
            uplink.yield(.watch(watch.users, frame))
        case .presenceUnwatch(let unwatch):
            uplink.yield(.unwatch(unwatch.users, frame))
        case .locationShareStart(let start):
            uplink.yield(.shareStart(start, frame))
        case .locationShareStop:
            uplink.yield(.shareStop(frame))
        case .locationUpdate(let update):
            uplink.yield(.locationUpdate(update, frame))
        case .locationWatch(let watch):
            uplink.yield(.locationWatch(watch.users, frame))
        case .locationUnwatch(let unwatch):
            uplink.yield(.locationUnwatch(unwatch.users, frame))
        case .subscribe(let subscribe):
            uplink.yield(.subscribe(subscribe, frame))
        case .unsubscribe(let unsubscribe):
            uplink.yield(.unsubscribe(unsubscribe, frame))
        case .publish(let publish):
            uplink.yield(.publish(publish, frame))
        case .logout:
            try await writer.reply(Ack(sequence: frame.header.sequence), to: frame)
            return .logout
        case .login:
            try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .alreadyLoggedIn), to: frame)
        case .hello(let hello):
            try await writer.send(.helloOK(helloOK(hello, frame)), replyingTo: frame)
        default:
            try await writer.reply(
                Ack.refusing(sequence: frame.header.sequence, code: .unknownOperation, message: "not supported by this gateway yet"), to: frame)
        }
        return .handled
    }

    /// What the device asked for that needs the broker: done in order, apart from the
    /// frame loop.
    enum UplinkJob: Sendable {
        case chat(ChatSend, IMFrame)
        case receipt(ReadReceipt, IMFrame)
        case watch([String], IMFrame)
        case unwatch([String], IMFrame)
        case shareStart(LocationShareStart, IMFrame)
        case shareStop(IMFrame)
        case locationUpdate(LocationUpdate, IMFrame)
        case locationWatch([String], IMFrame)
        case locationUnwatch([String], IMFrame)
        case subscribe(Subscribe, IMFrame)
        case unsubscribe(Unsubscribe, IMFrame)
        case publish(Publish, IMFrame)
        /// The device ACKed chat deliveries (``PendingDeliveries/takeDelivered()``): tell
        /// their senders (no reply to the device).
        case delivered
    }

    /// Runs the device's requests that need the broker one after the other (chat order
    /// per conversation), each ACKed once the broker has it. Runs apart from the frame
    /// loop: under ack-through our publishes wait behind the device's unACKed deliveries,
    /// so the device's ACKs (handled by the frame loop) must never wait behind them.
    ///
    /// Chat messages are pipelined: each is handed to libmosquitto in order and its ACK is
    /// written by ``acknowledgeChats(_:_:_:)`` once the broker has it, so many are in flight
    /// together (up to the MQTT client's in-flight limit).
    private func publishInOrder(
        _ uplink: AsyncStream<UplinkJob>, _ session: DeviceSession, _ writer: FrameWriter,
        _ deliveries: PendingDeliveries, _ chatAcks: BatchingQueue<InFlight>
    ) async throws {
        let location = context.configuration.location
        var limiter = RateLimiter(ratePerSecond: location.maxUpdatesPerSecond, burst: max(1, location.maxUpdatesPerSecond))
        for await job in uplink {
            switch job {
            case .shareStart, .shareStop, .locationUpdate, .locationWatch, .locationUnwatch:
                try await handleLocation(job, session, writer, &limiter)
            case .subscribe, .unsubscribe, .publish:
                try await handlePubSub(job, session, writer)
            case .delivered:
                // Pipelined like chat, and coalesced: the ACKs that arrived meanwhile go in
                // one publish per sender (a device ACKing a backlog of 100 from one sender
                // costs one receipt message, not 100).
                for (sender, ids) in Self.bySender(deliveries.takeDelivered()) {
                    do {
                        let ticket = try await session.startReceipt(.delivered, to: sender, messageIDs: ids)
                        chatAcks.append(.receipt(ticket, messageID: ids[0]))
                    } catch {
                        logger.notice("delivered receipt not published", metadata: ["error": "\(error)", "message-id": "\(ids[0])"])
                    }
                }
            case .chat(let chat, let frame):
                if let inFlight = try await startChat(chat, frame, session, writer) { chatAcks.append(.chat(inFlight)) }
            case .receipt(let receipt, let frame):
                do {
                    try IMIdentifier.validate(receipt.to, kind: .user)
                    try await session.publishReadReceipt(receipt)
                    try await writer.reply(Ack(sequence: frame.header.sequence, messageID: receipt.messageID), to: frame)
                } catch let error as IMIdentifierError {
                    try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .invalidUserID, message: "\(error)"), to: frame)
                } catch {
                    try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .brokerUnavailable, message: "\(error)"), to: frame)
                }
            case .watch(let users, let frame):
                // The retained presence of every device of the watched users arrives at
                // once, then every change (PRESENCE notices).
                do {
                    for user in users { try IMIdentifier.validate(user, kind: .user) }
                    let results = try await session.client.subscribe(users.map { .init(context.topics.presenceFilter(user: $0), qos: .atLeastOnce) })
                    let refused = results.contains { if case .rejected = $0 { true } else { false } }
                    try await writer.reply(
                        refused ? Ack.refusing(sequence: frame.header.sequence, code: .forbidden) : Ack(sequence: frame.header.sequence), to: frame)
                } catch let error as IMIdentifierError {
                    try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .invalidUserID, message: "\(error)"), to: frame)
                } catch {
                    try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .brokerUnavailable, message: "\(error)"), to: frame)
                }
            case .unwatch(let users, let frame):
                do {
                    try await session.client.unsubscribe(users.filter { IMIdentifier.isValid($0) }.map { context.topics.presenceFilter(user: $0) })
                    try await writer.reply(Ack(sequence: frame.header.sequence), to: frame)
                } catch {
                    try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .brokerUnavailable, message: "\(error)"), to: frame)
                }
            }
        }
    }

    /// Location sharing (PROTOCOL.md 6.7): the sharer names an audience and a duration;
    /// positions go out QoS 0, throttled; a watcher outside the audience is refused.
    private func handleLocation(_ job: UplinkJob, _ session: DeviceSession, _ writer: FrameWriter, _ limiter: inout RateLimiter) async throws {
        let shares = context.shares
        let me = session.user
        do {
            switch job {
            case .shareStart(let start, let frame):
                for user in start.audience { try IMIdentifier.validate(user, kind: .user) }
                let share = await shares.start(sharer: me, audience: Set(start.audience), duration: Double(start.duration))
                let duration = UInt32(share.remaining(now: Date.now.timeIntervalSince1970).rounded(.up))
                try await session.publishShare(audience: start.audience, until: UInt64(share.expiresAt * 1000), duration: duration)
                try await writer.reply(Ack(sequence: frame.header.sequence), to: frame)
            case .shareStop(let frame):
                await shares.stop(sharer: me)
                try await session.clearShare()
                try await writer.reply(Ack(sequence: frame.header.sequence), to: frame)
            case .locationUpdate(let update, let frame):
                guard let share = await shares.isSharing(me) else {
                    try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .forbidden, message: "start sharing first"), to: frame)
                    return
                }
                guard limiter.allow(now: Date.now.timeIntervalSince1970) else {
                    try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .rateLimited,
                        message: "at most \(context.configuration.location.maxUpdatesPerSecond) updates per second"), to: frame)
                    return
                }
                let left = UInt32(share.remaining(now: Date.now.timeIntervalSince1970).rounded(.up))
                try await session.publishLocation(update, expiry: min(UInt32(clamping: context.configuration.location.retainExpiry), left))
                try await writer.reply(Ack(sequence: frame.header.sequence), to: frame)
            case .locationWatch(let users, let frame):
                for user in users { try IMIdentifier.validate(user, kind: .user) }
                var refused: [String] = []
                for user in users where !(await shares.canWatch(watcher: me, sharer: user)) { refused.append(user) }
                guard refused.isEmpty else {
                    try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .forbidden,
                        message: "not in the audience of \(refused.joined(separator: ", "))"), to: frame)
                    return
                }
                _ = try await session.client.subscribe(users.map { .init(context.topics.location(user: $0), qos: .atMostOnce) })
                try await writer.reply(Ack(sequence: frame.header.sequence), to: frame)
            case .locationUnwatch(let users, let frame):
                try await session.client.unsubscribe(users.filter { IMIdentifier.isValid($0) }.map { context.topics.location(user: $0) })
                try await writer.reply(Ack(sequence: frame.header.sequence), to: frame)
            default:
                return
            }
        } catch {
            guard let frame = job.frame else { return }
            let code: IMErrorCode = error is IMIdentifierError ? .invalidUserID : .brokerUnavailable
            try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: code, message: "\(error)"), to: frame)
        }
    }

    /// Generic publish/subscribe inside the configured topic space (PROTOCOL.md 6.8).
    private func handlePubSub(_ job: UplinkJob, _ session: DeviceSession, _ writer: FrameWriter) async throws {
        let policy = context.configuration.pubsub
        let maxQoS = IMQoS(rawValue: UInt8(clamping: policy.maxQoS)) ?? .exactlyOnce
        do {
            switch job {
            case .subscribe(let subscribe, let frame):
                var results = [WireSubscriptionResult?](repeating: nil, count: subscribe.subscriptions.count)
                var wanted: [(index: Int, subscription: MosquittoClient.Subscription)] = []
                for (index, request) in subscribe.subscriptions.enumerated() {
                    guard policy.allowSubscribe else {
                        results[index] = WireSubscriptionResult(filter: request.filter, outcome: .refused(.forbidden))
                        continue
                    }
                    guard let filter = try? context.topics.pubsubFilter(request.filter) else {
                        results[index] = WireSubscriptionResult(filter: request.filter, outcome: .refused(.invalidTopic))
                        continue
                    }
                    let qos = QoS(rawValue: min(request.qos, maxQoS).rawValue) ?? .atMostOnce
                    wanted.append((index, .init(filter, qos: qos)))
                }
                if !wanted.isEmpty {
                    let granted = try await session.client.subscribe(wanted.map(\.subscription))
                    for (position, entry) in wanted.enumerated() {
                        let filter = subscribe.subscriptions[entry.index].filter
                        switch granted[position] {
                        case .granted(let qos):
                            results[entry.index] = WireSubscriptionResult(filter: filter, outcome: .granted(IMQoS(rawValue: qos.rawValue) ?? .atMostOnce))
                        case .rejected:
                            results[entry.index] = WireSubscriptionResult(filter: filter, outcome: .refused(.forbidden))
                        }
                    }
                }
                try await writer.reply(Ack(sequence: frame.header.sequence, subscriptions: results.compactMap { $0 }), to: frame)
            case .unsubscribe(let unsubscribe, let frame):
                let filters = unsubscribe.filters.compactMap { try? context.topics.pubsubFilter($0) }
                if !filters.isEmpty { try await session.client.unsubscribe(filters) }
                try await writer.reply(Ack(sequence: frame.header.sequence), to: frame)
            case .publish(let publish, let frame):
                guard policy.allowPublish else {
                    try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .forbidden, message: "publishing is not allowed"), to: frame)
                    return
                }
                guard let topic = try? context.topics.pubsubTopic(publish.topic) else {
                    try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .invalidTopic,
                        message: "\(publish.topic) is outside \(context.configuration.topicPrefix)/\(policy.topicSpace)/"), to: frame)
                    return
                }
                guard publish.qos <= maxQoS else {
                    try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .qosNotSupported, message: "at most QoS \(maxQoS.rawValue)"), to: frame)
                    return
                }
                try await session.client.publish(
                    topic: topic, payload: Array(publish.payload.readableBytesView), qos: QoS(rawValue: publish.qos.rawValue) ?? .atMostOnce,
                    retain: publish.retain, properties: MQTTProperties(userProperties: [UserProperty("sender", session.user)]))
                try await writer.reply(Ack(sequence: frame.header.sequence, serverTime: unixMilliseconds()), to: frame)
            default:
                return
            }
        } catch {
            guard let frame = job.frame else { return }
            try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .brokerUnavailable, message: "\(error)"), to: frame)
        }
    }

    /// Message ids grouped by sender, senders and ids in the order they came.
    static func bySender(_ origins: [PendingDeliveries.Origin]) -> [(sender: String, ids: [String])] {
        var groups: [(sender: String, ids: [String])] = []
        var index: [String: Int] = [:]
        for origin in origins {
            if let at = index[origin.from] {
                groups[at].ids.append(origin.messageID)
            } else {
                index[origin.from] = groups.count
                groups.append((origin.from, [origin.messageID]))
            }
        }
        return groups
    }

    /// A publish handed to the broker, waiting for its acknowledgement.
    enum InFlight: Sendable {
        /// A chat message: ACKed to the device once the broker has it.
        case chat(ChatInFlight)
        /// A delivered receipt: only logged if it fails.
        case receipt(MosquittoClient.PublishTicket, messageID: String)
    }

    /// A chat message handed to the broker, waiting for its acknowledgement.
    struct ChatInFlight: Sendable {
        var chat: ChatSend
        var frame: IMFrame
        var serverTime: UInt64
        var ticket: MosquittoClient.PublishTicket
    }

    /// Starts publishing one chat message (in order with the others); a resent id that
    /// was already accepted is ACKed at once without publishing again, a refused one gets
    /// its negative ACK. Returns what ``acknowledgeChats(_:_:_:)`` then waits for.
    private func startChat(_ chat: ChatSend, _ frame: IMFrame, _ session: DeviceSession, _ writer: FrameWriter) async throws -> ChatInFlight? {
        if let earlier = context.dedup.accepted(user: session.user, id: chat.messageID) {
            try await writer.reply(Ack(sequence: frame.header.sequence, messageID: chat.messageID, serverTime: earlier), to: frame)
            return nil
        }
        let serverTime = unixMilliseconds()
        do {
            let ticket = try await session.startChat(chat, serverTime: serverTime)
            return ChatInFlight(chat: chat, frame: frame, serverTime: serverTime, ticket: ticket)
        } catch {
            logger.warning("chat not published", metadata: ["error": "\(error)", "message-id": "\(chat.messageID)"])
            try await writer.reply(Ack.refusing(sequence: frame.header.sequence, code: .brokerUnavailable, message: "\(error)"), to: frame)
            return nil
        }
    }

    /// ACKs each chat message started by ``startChat(_:_:_:_:)`` once the broker has it (in
    /// order: the broker acknowledges in order), and remembers its id for resends; logs a
    /// delivered receipt the broker did not take.
    private func acknowledgeChats(_ inFlight: BatchingQueue<InFlight>, _ session: DeviceSession, _ writer: FrameWriter) async throws {
        while true {
            // Everything started meanwhile, settled in one visit to the MQTT client and
            // ACKed in one write.
            let batch = await inFlight.next(upTo: 128)
            guard !batch.isEmpty else { return }
            let tickets = batch.map { item -> MosquittoClient.PublishTicket in
                switch item {
                case .chat(let chat): chat.ticket
                case .receipt(let ticket, _): ticket
                }
            }
            let outcomes = await session.client.completions(of: tickets)
            var acks: [IMFrame] = []
            let timestamp = unixSeconds()
            for (item, outcome) in zip(batch, outcomes) {
                switch (item, outcome) {
                case (.receipt, .success):
                    break
                case (.receipt(_, let messageID), .failure(let error)):
                    logger.notice("delivered receipt not published", metadata: ["error": "\(error)", "message-id": "\(messageID)"])
                case (.chat(let chat), .success):
                    context.dedup.record(user: session.user, id: chat.chat.messageID, serverTime: chat.serverTime)
                    acks.append(Ack(sequence: chat.frame.header.sequence, messageID: chat.chat.messageID, serverTime: chat.serverTime)
                        .frame(timestamp: timestamp, sessionID: chat.frame.header.sessionID))
                case (.chat(let chat), .failure(let error)):
                    logger.warning("chat not published", metadata: ["error": "\(error)", "message-id": "\(chat.chat.messageID)"])
                    acks.append(Ack.refusing(sequence: chat.frame.header.sequence, code: .brokerUnavailable, message: "\(error)")
                        .frame(timestamp: timestamp, sessionID: chat.frame.header.sessionID))
                }
            }
            if !acks.isEmpty { try await writer.write(contentsOf: acks) }
        }
    }

    /// Turns what the MQTT session receives into frames for the device.
    private func deliver(_ session: DeviceSession, _ downlink: Downlink) async throws {
        for await message in session.client.messages {
            switch context.topics.classify(message.topic) {
            case .inbox:
                guard let payload = try? PayloadCodec.decode(ChatPayload.self, from: message.payload),
                      var delivery = try? payload.delivery()
                else {
                    logger.warning("dropping an unreadable inbox message", metadata: ["topic": "\(message.topic)"])
                    await session.client.acknowledge(message)
                    continue
                }
                delivery.resend = message.dup
                downlink.enqueue(
                    .delivery(delivery), class: .chat, deliveryID: message.deliveryID,
                    origin: PendingDeliveries.Origin(from: delivery.from, messageID: delivery.messageID))
                context.statistics.messagesOut.add(1, ordering: .relaxed)
            case .location(let sharer):
                // Checked again at each position: a stopped or expired share (or one
                // whose audience changed) stops the stream at once.
                if !message.payload.isEmpty, await context.shares.canWatch(watcher: session.user, sharer: sharer),
                   let payload = try? PayloadCodec.decode(LocationPayload.self, from: message.payload),
                   payload.user == sharer, let notice = try? payload.notice() {
                    downlink.enqueue(.location(notice), class: .location, coalescingKey: sharer)
                }
            case .pubsub(let clientTopic):
                let publish = Publish(
                    topic: clientTopic, payload: ByteBuffer(bytes: message.payload), qos: IMQoS(rawValue: message.qos.rawValue) ?? .atMostOnce,
                    retain: message.retain, serverTime: unixMilliseconds(), resend: message.dup)
                downlink.enqueue(.publish(publish), class: .other, deliveryID: message.qos == .atMostOnce ? nil : message.deliveryID)
                context.statistics.messagesOut.add(1, ordering: .relaxed)
            case .presence(let user, _):
                // Retained "online"/"offline" per device; an empty retained payload (a
                // cleared presence) carries nothing to tell.
                if !message.payload.isEmpty, let payload = try? PayloadCodec.decode(PresencePayload.self, from: message.payload),
                   let notice = try? payload.notice(user: user) {
                    downlink.enqueue(.presence(notice), class: .presence, coalescingKey: message.topic)
                }
                await session.client.acknowledge(message)
            case .receipts:
                if let payload = try? PayloadCodec.decode(ReceiptPayload.self, from: message.payload), let notices = try? payload.notices() {
                    for notice in notices { downlink.enqueue(.receiptNotice(notice), class: .receipt) }
                }
                // Acknowledged at once, not through the device's ACK: under ack-through an
                // unACKed notice would hold the device's own chat behind it, and a receipt
                // lost in a crash costs little (the device's ACK is accepted and ignored).
                await session.client.acknowledge(message)
            default:
                await session.client.acknowledge(message)
            }
        }
    }
}

extension DeviceConnection.UplinkJob {
    /// The request frame, for the reply.
    var frame: IMFrame? {
        switch self {
        case .chat(_, let frame), .receipt(_, let frame), .watch(_, let frame), .unwatch(_, let frame),
            .shareStart(_, let frame), .shareStop(let frame), .locationUpdate(_, let frame),
            .locationWatch(_, let frame), .locationUnwatch(_, let frame),
            .subscribe(_, let frame), .unsubscribe(_, let frame), .publish(_, let frame):
            return frame
        case .delivered:
            return nil
        }
    }
}

/// How a logged-in connection ended; the first to claim decides.
final class EndingRecord: Sendable {
    private let value = Mutex<DeviceSession.Ending?>(nil)

    /// Records `ending` if nothing was recorded yet; true if it was.
    func claim(_ ending: DeviceSession.Ending) -> Bool {
        value.withLock { current in
            guard current == nil else { return false }
            current = ending
            return true
        }
    }

    var current: DeviceSession.Ending? { value.withLock { $0 } }
}

/// Deliveries written to the device and not ACKed yet: frame sequence -> MQTT delivery,
/// with when it was written.
final class PendingDeliveries: Sendable {
    /// A chat message's sender and id, for its "delivered" receipt.
    struct Origin: Sendable {
        var from: String
        var messageID: String
    }

    private let pending = Mutex<[UInt32: (deliveryID: UInt64, origin: Origin?, since: ContinuousClock.Instant)]>([:])

    func insert(_ sequence: UInt32, _ deliveryID: UInt64, origin: Origin? = nil) {
        pending.withLock { $0[sequence] = (deliveryID, origin, .now) }
    }

    func remove(_ sequence: UInt32) -> (deliveryID: UInt64, origin: Origin?)? {
        pending.withLock { $0.removeValue(forKey: sequence).map { ($0.deliveryID, $0.origin) } }
    }

    /// How long the oldest unACKed delivery has waited.
    var oldestAge: Duration? {
        pending.withLock { $0.values.map(\.since).min() }.map { .now - $0 }
    }

    /// ACKed chat deliveries whose "delivered" receipt is not published yet.
    private let delivered = Mutex<[Origin]>([])

    /// Notes an ACKed delivery for its receipt; `true` if it is the first since the last
    /// ``takeDelivered()`` (the caller then schedules one).
    func noteDelivered(_ origin: Origin) -> Bool {
        delivered.withLock { list in
            list.append(origin)
            return list.count == 1
        }
    }

    /// Every delivery noted since the last call, in ACK order.
    func takeDelivered() -> [Origin] {
        delivered.withLock { list in
            defer { list.removeAll(keepingCapacity: true) }
            return list
        }
    }
}

/// Writes frames with this connection's sequence numbers and the current time.
struct FrameWriter: Sendable {
    let outbound: NIOAsyncChannelOutboundWriter<IMFrame>
    let sequence: OutboundSequence
    /// The session id of the LOGIN, carried by what the gateway sends on its own.
    var sessionID: UInt16 = 0

    func write(_ frame: IMFrame) async throws {
        try await outbound.write(frame)
    }

    /// Writes frames in order with one flush.
    func write(contentsOf frames: [IMFrame]) async throws {
        try await outbound.write(contentsOf: frames)
    }

    /// Sends a message with the next sequence number; a reply echoes the request's
    /// session id.
    func send(_ message: IMMessage, replyingTo request: IMFrame? = nil) async throws {
        try await outbound.write(message.frame(
            sequence: sequence.next(), timestamp: unixSeconds(), sessionID: request?.header.sessionID ?? sessionID))
    }

    /// An ACK for `request`.
    func reply(_ ack: Ack, to request: IMFrame) async throws {
        try await outbound.write(ack.frame(timestamp: unixSeconds(), sessionID: request.header.sessionID))
    }
}
