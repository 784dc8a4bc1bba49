import AsyncToolkit
import CMosquitto

#if canImport(Glibc)
import Glibc
#endif

/// An MQTT client: libmosquitto underneath, driven by a `MosquittoEventLoop`.
///
/// The client runs on its loop's thread (the loop is its executor), so thousands of
/// clients share one thread. Typical use:
///
/// ```swift
/// var config = MosquittoClient.Configuration(clientID: "alice-phone", port: 1883)
/// config.cleanStart = false
/// config.sessionExpiryInterval = 7 * 24 * 3600
/// let client = MosquittoClient(configuration: config)
/// let session = try await client.connect()
/// _ = try await client.subscribe("im/u/alice/inbox", qos: .atLeastOnce)
/// try await client.publish(topic: "im/u/bob/inbox", payload: Array("hi".utf8), qos: .atLeastOnce)
/// for await message in client.messages { ... }
/// await client.close()
/// ```
///
/// Every call to the client runs on its loop's thread. Code that awaits the client in a
/// tight loop is fastest in a task that prefers the loop as its executor,
/// `Task(executorPreference: client.loop.taskExecutor) { ... }`: its own code then runs on that thread
/// too, instead of hopping between a global-executor thread and the loop at every await.
/// Event-driven code that must not suspend uses ``perform(_:)``,
/// ``startPublish(topic:payload:qos:retain:properties:completion:)`` and
/// ``deliverMessages(to:)`` instead.
///
/// Reconnecting is the caller's policy: watch `events` and call `connect()` again.
/// Publishes still in flight when a connection drops are resent by libmosquitto (DUP)
/// after the next successful `connect()` and complete then; `close()` fails them.
public actor MosquittoClient {
    /// What the client was built with.
    public nonisolated let configuration: Configuration
    /// The loop that drives this client (and is its executor).
    public nonisolated let loop: MosquittoEventLoop
    /// Messages received on this client's subscriptions, in arrival order. One consumer.
    /// Finishes when the client is closed.
    public nonisolated let messages: AsyncStream<MosquittoMessage>
    /// Connection events (connected, disconnected with the reason). One consumer.
    /// Finishes when the client is closed.
    public nonisolated let events: AsyncStream<Event>

    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    /// A change of connection state.
    public enum Event: Sendable, Hashable {
        /// CONNACK accepted the connection.
        case connected(ConnectResult)
        /// The connection ended.
        case disconnected(LossReason)
    }

    /// What CONNACK said.
    public struct ConnectResult: Sendable, Hashable {
        /// The broker resumed a stored session for this client id.
        public var sessionPresent: Bool
        /// What the broker announced it can do (its CONNACK properties).
        public var capabilities: BrokerCapabilities
        public init(sessionPresent: Bool, capabilities: BrokerCapabilities = BrokerCapabilities()) {
            self.sessionPresent = sessionPresent
            self.capabilities = capabilities
        }
    }

    /// Where the client stands.
    public enum State: Sendable, Hashable {
        case idle, connecting, connected, disconnecting, disconnected, closed
    }

    /// The client's current state.
    public private(set) var state: State = .idle

    private let messageSink: AsyncStream<MosquittoMessage>.Continuation
    private let eventSink: AsyncStream<Event>.Continuation
    /// Set by ``deliverMessages(to:)``: takes messages instead of `messages`.
    private var messageHandler: (@Sendable (MosquittoMessage) -> Handling)?
    /// Set by ``reportEvents(to:)``: takes events instead of `events`.
    private var eventHandler: (@Sendable (Event) -> Void)?
    private var io: ClientIO?
    private var aborting = false

    // Every wait below re-checks, inside its continuation's body, whether what it waits for
    // has happened already: entering `withChecked*Continuation` can be a suspension point
    // of its own (the runtime switches executors there when the task prefers a task
    // executor other than the one this job runs with), and libmosquitto's callbacks may
    // run in between.

    /// Whom a publish's outcome goes to.
    enum PublishWaiter {
        /// A task in ``completion(of:)``.
        case task(CheckedContinuation<Void, any Error>)
        /// ``startPublish(topic:payload:qos:retain:properties:completion:)``'s callback.
        case callback(@Sendable (Result<Void, MosquittoError>) -> Void)

        func resume(_ outcome: Result<Void, MosquittoError>) {
            switch self {
            case .task(let continuation): continuation.resume(with: outcome.mapError { $0 as any Error })
            case .callback(let callback): callback(outcome)
            }
        }
    }

    /// What the client waits for from the broker (plain bookkeeping: the client resumes
    /// the waiters it returns).
    private var pending = PendingOperations<
        CheckedContinuation<ConnectResult, any Error>, CheckedContinuation<[ReasonCode], any Error>,
        CheckedContinuation<Void, any Error>, PublishWaiter
    >()
    /// Counts the connections that ended: ``disconnect(reason:properties:)`` waits for the next.
    private let connectionsEnded = AsyncCondition<UInt64>(0)
    /// Publishes handed to libmosquitto and not settled; callers of ``startPublish(topic:payload:qos:retain:properties:)``
    /// wait here for a slot.
    private let slots = AsyncCondition(Slots())

    private struct Slots: Sendable {
        var inflight = 0
        /// Counts the times the client failed every publish (closed): a slot's waiters end then.
        var failures: UInt64 = 0
        var failure: MosquittoError?
    }

    /// A publish handed to libmosquitto by ``startPublish(topic:payload:qos:retain:properties:)``,
    /// to be awaited with ``completion(of:)``.
    public struct PublishTicket: Sendable, Hashable {
        let id: UInt64
    }

    /// Creates a client. Nothing happens on the network until `connect()`.
    ///
    /// With `streams` false, `messages` and `events` are finished from the start and cost
    /// nothing (each stream keeps storage of its own for the client's life): for event-driven
    /// code with thousands of clients, which sets ``deliverMessages(to:)`` and
    /// ``reportEvents(to:)`` before it connects. What arrives while no handler is set is
    /// dropped then.
    public init(configuration: Configuration, loop: MosquittoEventLoop = .shared, streams: Bool = true) {
        self.configuration = configuration
        self.loop = loop
        if streams {
            (messages, messageSink) = AsyncStream.makeStream(of: MosquittoMessage.self)
            (events, eventSink) = AsyncStream.makeStream(of: Event.self)
        } else {
            (messages, messageSink) = Self.finishedMessages
            (events, eventSink) = Self.finishedEvents
        }
    }

    /// The streams of every client made without its own (`streams: false`).
    private static let finishedMessages = {
        let made = AsyncStream.makeStream(of: MosquittoMessage.self)
        made.continuation.finish()
        return made
    }()
    private static let finishedEvents = {
        let made = AsyncStream.makeStream(of: Event.self)
        made.continuation.finish()
        return made
    }()

    // MARK: Connect and disconnect

    /// Connects (or reconnects) and returns when the broker accepted the connection.
    ///
    /// Throws `MosquittoError.connectionRefused` with the CONNACK reason (bad
    /// credentials, not authorised...), `.connectTimeout`, or `.library` for network and
    /// TLS failures.
    @discardableResult
    public func connect() async throws -> ConnectResult {
        switch state {
        case .idle, .disconnected: break
        case .closed: throw MosquittoError.closed
        case .connecting, .connected, .disconnecting:
            throw MosquittoError.invalidState("connect() while \(state)")
        }
        let io = try prepareHandle()
        state = .connecting
        pending.connectStarted()
        aborting = false
        loop.forgetSocket(io)
        io.ownedByConnector = true
        io.tlsHandshaking = configuration.tls != nil
        io.usesTLS = configuration.tls != nil
        let handle = LibmosquittoHandle(io.mosq)
        let configuration = configuration
        let rc: Int32 = await withCheckedContinuation { continuation in
            loop.connector.async {
                continuation.resume(returning: handle.startConnect(configuration))
            }
        }
        io.ownedByConnector = false
        if state == .closed {
            // close() ran meanwhile and left the handle to us.
            loop.unregister(io)
            throw MosquittoError.closed
        }
        loop.reconcileSocket(io)
        guard rc == Int32(MOSQ_ERR_SUCCESS.rawValue) || rc == Int32(MOSQ_ERR_CONN_PENDING.rawValue) else {
            state = .disconnected
            io.tlsHandshaking = false
            throw MosquittoError.code(rc)
        }
        io.connectDeadline = monotonicNanoseconds() + UInt64(max(configuration.connectTimeout, 0.1) * 1e9)
        loop.markDirty(io)
        return try await withCheckedThrowingContinuation { continuation in
            // CONNACK's outcome may have come already (a refusal, and the connection closed
            // right after it).
            if let outcome = pending.takeConnack() {
                continuation.resume(with: outcome.mapError { $0 as any Error })
            } else if state != .connecting {
                continuation.resume(throwing: state == .closed ? MosquittoError.closed : MosquittoError.notConnected)
            } else {
                pending.awaitConnack(continuation)
            }
        }
    }

    /// Disconnects. `reason` 0x00 (the default) is a normal disconnect: the broker
    /// discards the will. `.disconnectWithWill` (0x04, v5 only) makes the broker publish
    /// the will. Everything queued before is sent first. Returns when the connection is
    /// closed; does nothing when not connected.
    ///
    /// In `.manual` acknowledgement mode, with deliveries not acknowledged yet, it aborts
    /// instead (see ``abort()``): their held PUBACKs sit ahead of DISCONNECT in
    /// libmosquitto's out-queue and cannot be taken out, and sending them would
    /// acknowledge what the application did not. The broker then publishes the will and
    /// redelivers those messages to the session's next connection. A disconnect never
    /// waits on acknowledgements the client itself holds back.
    public func disconnect(reason: ReasonCode = .normalDisconnection, properties: MQTTProperties = MQTTProperties()) async throws {
        guard let io, state == .connected || state == .connecting else { return }
        if state == .connecting && io.ownedByConnector {
            throw MosquittoError.invalidState("disconnect() while the TCP connect is in progress")
        }
        if pending.heldCount > 0 {
            abort()
            return
        }
        let handle = LibmosquittoHandle(io.mosq)
        let list = try properties.makeList()
        state = .disconnecting
        io.holdWrites = false
        guard try handle.disconnect(reason: reason, properties: list) else {
            connectionEnded(.normal)
            return
        }
        loop.markDirty(io)
        // Until the connection has ended (whatever the caller does meanwhile).
        let ended = connectionsEnded.read { $0 }
        guard state == .disconnecting else { return }
        await Task { [connectionsEnded] in _ = await connectionsEnded.wait { $0 != ended } }.value
    }

    /// Drops the connection at once without sending anything still queued: no
    /// DISCONNECT (so the broker publishes the will), no held acknowledgements (so the
    /// broker redelivers those messages to this session later). What a crash would do.
    public func abort() {
        guard let io, io.socketFD >= 0, state == .connected || state == .connecting || state == .disconnecting else { return }
        aborting = true
        let socket = io.socketFD
        // Out of epoll while the descriptor is still open (a copy held by another process
        // would otherwise keep its registration alive).
        loop.forgetSocket(io)
        shutdown(socket, Int32(SHUT_RDWR))
        // The next read sees the end of the stream and closes the socket
        // (on_disconnect runs with MOSQ_ERR_CONN_LOST, reported as `.aborted`).
        let rc = mosquitto_loop_read(io.mosq, 1)
        if rc != 0 { handleIOFailure(rc) }
        loop.reconcileSocket(io)
    }

    /// Disconnects normally if connected (aborts with deliveries not acknowledged, as
    /// ``disconnect(reason:properties:)`` says), then releases the libmosquitto handle and
    /// its descriptors. Operations still waiting fail with `.closed`; `messages` and
    /// `events` finish. The client cannot be used afterwards.
    public func close() async {
        if state == .connected {
            try? await disconnect()
        }
        guard state != .closed else { return }
        state = .closed
        failAll(MosquittoError.closed, includingPublishes: true)
        if let io, !io.ownedByConnector {
            // (While the connector still uses the handle, connect() destroys it on return.)
            loop.unregister(io)
        }
        io = nil
        messageHandler = nil
        eventHandler = nil
        messageSink.finish()
        eventSink.finish()
    }

    // MARK: Publish

    /// Publishes and returns when the broker has it: QoS 0 once written to the socket,
    /// QoS 1 on PUBACK, QoS 2 on PUBCOMP.
    ///
    /// Throws `.notConnected` without queueing anything when the client is not connected
    /// (so retrying cannot duplicate), `.publishRejected` when the broker refused it
    /// (v5 reason >= 0x80, e.g. not authorised). At most
    /// `configuration.maxInflightPublishes` publishes are in flight; further calls wait
    /// for a slot. A QoS 1/2 publish in flight when the connection drops is resent after
    /// the next `connect()` and completes then.
    public func publish(
        topic: String, payload: [UInt8], qos: QoS = .atMostOnce, retain: Bool = false,
        properties: MQTTProperties = MQTTProperties()
    ) async throws {
        let ticket = try await startPublish(topic: topic, payload: payload, qos: qos, retain: retain, properties: properties)
        try await completion(of: ticket)
    }

    /// Hands the publish to libmosquitto and returns without waiting for the broker, so
    /// that publishes started one after the other go out in that order and are in flight
    /// together; await each with ``completion(of:)`` (exactly once). Waits only for an
    /// in-flight slot; throws like ``publish(topic:payload:qos:retain:properties:)``.
    public func startPublish(
        topic: String, payload: [UInt8], qos: QoS = .atMostOnce, retain: Bool = false,
        properties: MQTTProperties = MQTTProperties()
    ) async throws -> PublishTicket {
        guard state == .connected else { throw MosquittoError.notConnected }
        try await takeSlot()
        guard state == .connected else {
            releaseSlot()
            throw MosquittoError.notConnected
        }
        do {
            let mid = try handOver(topic: topic, payload: payload, qos: qos, retain: retain, properties: properties)
            return PublishTicket(id: pending.publishStarted(mid: mid, qos: qos, waiter: nil))
        } catch {
            releaseSlot()
            throw error
        }
    }

    /// Hands the publish to libmosquitto at once and calls `completion` on the loop
    /// thread with the outcome (as ``completion(of:)`` would report it): for callers that
    /// are themselves event driven and must not suspend. Publishes started one after the
    /// other go out in that order. Does not wait for an in-flight slot: libmosquitto
    /// queues what exceeds the broker's receive maximum, so the caller bounds how many it
    /// starts. Throws, without calling `completion`, when it cannot be handed over.
    public func startPublish(
        topic: String, payload: [UInt8], qos: QoS = .atMostOnce, retain: Bool = false,
        properties: MQTTProperties = MQTTProperties(),
        completion: @escaping @Sendable (Result<Void, MosquittoError>) -> Void
    ) throws {
        guard state == .connected else { throw MosquittoError.notConnected }
        let mid = try handOver(topic: topic, payload: payload, qos: qos, retain: retain, properties: properties)
        slots.withLock { $0.inflight += 1 }
        _ = pending.publishStarted(mid: mid, qos: qos, waiter: .callback(completion))
    }

    /// PUBLISH handed to libmosquitto; returns its message id.
    private func handOver(topic: String, payload: [UInt8], qos: QoS, retain: Bool, properties: MQTTProperties) throws -> Int32 {
        guard let io else { throw MosquittoError.notConnected }
        if configuration.protocolVersion != .v5 && !properties.isEmpty {
            throw MosquittoError.invalidArgument("MQTT v5 properties on a 3.1.1 connection")
        }
        let mid = try LibmosquittoHandle(io.mosq).publish(
            topic: topic, payload: payload, qos: qos, retain: retain, properties: try properties.makeList())
        loop.markDirty(io)
        return mid
    }

    /// Returns when the broker has the publish of `ticket` (QoS 0: written; QoS 1: PUBACK;
    /// QoS 2: PUBCOMP), or throws why it failed. A QoS 1 or 2 publish whose connection ended
    /// before the acknowledgement waits for the next ``connect()`` (which sends it again);
    /// cancelling the waiting task ends the wait with `CancellationError`.
    public func completion(of ticket: PublishTicket) async throws {
        if let outcome = pending.takeOutcome(ticket.id) {
            try outcome.get()
            return
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                // An outcome that came meanwhile wins over a cancellation.
                switch pending.awaitCompletion(ticket.id, .task(continuation)) {
                case .settled(let outcome):
                    continuation.resume(with: outcome.mapError { $0 as any Error })
                case .collected:
                    if Task.isCancelled { continuation.resume(throwing: CancellationError()) } else { continuation.resume() }
                case .waiting:
                    if Task.isCancelled {
                        pending.abandon(ticket.id)
                        continuation.resume(throwing: CancellationError())
                    }
                }
            }
        } onCancel: {
            Task { await self.cancelCompletion(ticket) }
        }
    }

    /// A cancelled ``completion(of:)``: its waiter gets `CancellationError`. The message stays
    /// with libmosquitto (a QoS 1 or 2 publish waiting for its acknowledgement when the
    /// connection ended is sent again on the next connect); its outcome is dropped.
    private func cancelCompletion(_ ticket: PublishTicket) {
        guard pending.isAwaited(ticket.id), case .task(let continuation)? = pending.abandon(ticket.id) else { return }
        continuation.resume(throwing: CancellationError())
    }

    /// Publishes UTF-8 text.
    public func publish(
        topic: String, string: String, qos: QoS = .atMostOnce, retain: Bool = false,
        properties: MQTTProperties = MQTTProperties()
    ) async throws {
        try await publish(topic: topic, payload: Array(string.utf8), qos: qos, retain: retain, properties: properties)
    }

    /// Takes an in-flight slot, waiting for one while `configuration.maxInflightPublishes`
    /// are taken (first come, first served); throws when the client fails every publish
    /// meanwhile, or the task is cancelled.
    private func takeSlot() async throws {
        let limit = configuration.maxInflightPublishes
        let failures = slots.read { $0.failures }
        let outcome = await slots.wait { (slots: inout Slots) -> Result<Void, MosquittoError>? in
            if slots.failures != failures { return .failure(slots.failure ?? .closed) }
            guard slots.inflight < limit else { return nil }
            slots.inflight += 1
            return .success(())
        }
        guard let outcome else { throw CancellationError() }
        try outcome.get()
    }

    /// Gives an in-flight slot back (to the first waiter, if any).
    private func releaseSlot() {
        slots.withLock { $0.inflight -= 1 }
    }

    // MARK: Subscribe

    /// One subscription request.
    public struct Subscription: Sendable, Hashable {
        public var filter: String
        public var qos: QoS
        public var options: SubscribeOptions
        public init(_ filter: String, qos: QoS = .atLeastOnce, options: SubscribeOptions = SubscribeOptions()) {
            self.filter = filter
            self.qos = qos
            self.options = options
        }
    }

    /// Subscribes to one filter and returns the QoS the broker granted. Throws
    /// `.subscriptionRejected` if the broker refused it.
    @discardableResult
    public func subscribe(_ filter: String, qos: QoS = .atLeastOnce, options: SubscribeOptions = SubscribeOptions()) async throws -> QoS {
        let result = try await subscribe([Subscription(filter, qos: qos, options: options)])
        switch result[0] {
        case .granted(let granted): return granted
        case .rejected(let reason): throw MosquittoError.subscriptionRejected(filter: filter, reason)
        }
    }

    /// Subscribes to several filters; one result per filter, in order.
    public func subscribe(_ subscriptions: [Subscription]) async throws -> [SubscriptionResult] {
        guard state == .connected, let io else { throw MosquittoError.notConnected }
        if subscriptions.isEmpty { return [] }
        if configuration.protocolVersion != .v5 && subscriptions.contains(where: { $0.options != SubscribeOptions() }) {
            throw MosquittoError.invalidArgument("subscribe options need MQTT v5")
        }
        // libmosquitto takes one QoS and one option set per SUBSCRIBE: group by them.
        var groups: [(key: Subscription, indices: [Int])] = []
        let maximumQoS = configuration.subscriptionQoSLimit
        for (index, subscription) in subscriptions.enumerated() {
            var key = subscription
            key.filter = ""
            key.qos = min(key.qos, maximumQoS)
            if let group = groups.firstIndex(where: { $0.key == key }) {
                groups[group].indices.append(index)
            } else {
                groups.append((key, [index]))
            }
        }
        var results = [SubscriptionResult](repeating: .rejected(.unspecifiedError), count: subscriptions.count)
        // Every SUBSCRIBE goes out before the first SUBACK is awaited: one round trip, not one
        // per group (a SUBACK that comes before its wait is kept in `pending`).
        var issued: [(indices: [Int], mid: Int32)] = []
        for group in groups {
            let filters = group.indices.map { subscriptions[$0].filter }
            let mid = try LibmosquittoHandle(io.mosq).subscribe(filters, qos: group.key.qos, options: group.key.options)
            issued.append((group.indices, mid))
        }
        loop.markDirty(io)
        for group in issued {
            let mid = group.mid
            let codes = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[ReasonCode], any Error>) in
                if state != .connected {
                    continuation.resume(throwing: state == .closed ? MosquittoError.closed : MosquittoError.notConnected)
                } else if let codes = pending.awaitSuback(mid, continuation) {
                    continuation.resume(returning: codes)
                }
            }
            for (position, index) in group.indices.enumerated() {
                let code = position < codes.count ? codes[position] : .unspecifiedError
                results[index] = code.isFailure ? .rejected(code) : .granted(QoS(rawValue: code.rawValue) ?? .atMostOnce)
            }
        }
        return results
    }

    /// Unsubscribes from the filters; returns when the broker confirmed.
    public func unsubscribe(_ filters: [String]) async throws {
        guard state == .connected, let io else { throw MosquittoError.notConnected }
        if filters.isEmpty { return }
        let mid = try LibmosquittoHandle(io.mosq).unsubscribe(filters)
        loop.markDirty(io)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            if state != .connected {
                continuation.resume(throwing: state == .closed ? MosquittoError.closed : MosquittoError.notConnected)
            } else if pending.awaitUnsuback(mid, continuation) {
                continuation.resume()
            }
        }
    }

    /// Unsubscribes from one filter.
    public func unsubscribe(_ filter: String) async throws {
        try await unsubscribe([filter])
    }

    // MARK: Manual acknowledgement

    /// In `.manual` acknowledgement mode: the application is done with `message`. Once
    /// every delivered QoS 1/2 message is acknowledged, the held PUBACKs (and anything
    /// else queued) are written. Unknown or repeated ids are ignored.
    public func acknowledge(_ message: MosquittoMessage) {
        acknowledge(deliveryID: message.deliveryID)
    }

    /// See `acknowledge(_:)`.
    public func acknowledge(deliveryID: UInt64) {
        guard pending.acknowledge(deliveryID), let io else { return }
        io.holdWrites = false
        loop.markDirty(io)
    }

    /// Acknowledges several deliveries (see `acknowledge(_:)`).
    public func acknowledge(deliveryIDs: some Sequence<UInt64>) {
        for id in deliveryIDs { acknowledge(deliveryID: id) }
    }

    /// Delivered messages not yet acknowledged (manual mode).
    public var unacknowledgedCount: Int { pending.heldCount }

    /// Publishes waiting for the broker.
    public var inflightPublishes: Int { slots.read { $0.inflight } }

    /// Bytes waiting in libmosquitto's internal socketpair (drained by the loop; stays
    /// near 0), or nil without a handle or without a pair: with libmosquitto 2.0 the loop
    /// takes the pair away from the handle, so the library never writes into it.
    public var socketPairBacklog: Int? {
        guard let io, io.pairRead >= 0 else { return nil }
        return Int(cmosq_pending_bytes(io.pairRead))
    }

    // MARK: Callbacks, for event-driven callers

    /// Runs `body` on the client's loop thread, isolated to the client, after everything
    /// submitted to the loop before it: the way for code that must not suspend (a NIO
    /// channel handler, say) to use the client. Several calls made one after the other
    /// from one thread run in that order.
    public nonisolated func perform(_ body: @escaping @Sendable (isolated MosquittoClient) -> Void) {
        loop.execute { [self] in self.assumeIsolated { body($0) } }
    }

    /// When a message handed to a ``deliverMessages(to:)`` handler is acknowledged (in
    /// `.manual` acknowledgement mode; otherwise always at once).
    public enum Handling: Sendable, Hashable {
        /// Now: the handler is done with it (its PUBACK is not held).
        case now
        /// Later, by `acknowledge(_:)`: its PUBACK, and the client's writes, are held
        /// until then.
        case later
    }

    /// From now on, received messages go to `handler` (called on the loop thread, in
    /// arrival order) instead of `messages`; `nil` goes back to `messages`. The handler
    /// says whether it is done with the message at once. Set it before `connect()` for a
    /// resumed session: its queued messages follow CONNACK at once.
    public func deliverMessages(to handler: (@Sendable (MosquittoMessage) -> Handling)?) {
        messageHandler = handler
    }

    /// From now on, connection events go to `handler` (called on the loop thread)
    /// instead of `events`; `nil` goes back to `events`.
    public func reportEvents(to handler: (@Sendable (Event) -> Void)?) {
        eventHandler = handler
    }

    // MARK: Internals

    /// The libmosquitto handle, created (on the loop thread) on first connect.
    private func prepareHandle() throws -> ClientIO {
        if let io { return io }
        let io = try loop.register(clientID: configuration.clientID, cleanStart: configuration.cleanStart, client: self)
        do {
            try LibmosquittoHandle(io.mosq).configure(configuration)
        } catch {
            loop.unregister(io)
            throw error
        }
        Self.setCallbacks(of: io.mosq)
        self.io = io
        return io
    }

    private func failAll(_ error: MosquittoError, includingPublishes: Bool) {
        // (Without a connect waiter yet, connect() sees the state; a refusal kept for it stays.)
        let failure = pending.failAll(error, includingPublishes: includingPublishes)
        failure.connect?.resume(throwing: error)
        for waiter in failure.subscribes { waiter.resume(throwing: error) }
        for waiter in failure.unsubscribes { waiter.resume(throwing: error) }
        slots.withLock { slots in
            slots.inflight -= failure.publishes.count
            if includingPublishes {
                // Those waiting for a slot give up.
                slots.failures += 1
                slots.failure = error
            }
        }
        for settled in failure.publishes { settled.waiter?.resume(settled.outcome) }
        // A disconnect() waiting for the end returns.
        connectionsEnded.withLock { $0 += 1 }
    }

    /// The connection ended (on_disconnect, a failed TLS handshake, abort, timeout).
    private func connectionEnded(_ reason: LossReason) {
        guard state == .connecting || state == .connected || state == .disconnecting else { return }
        if state == .connecting { pending.connectEnded(.connectionLost(reason)) }
        state = .disconnected
        if let io {
            io.connectDeadline = nil
            io.tlsHandshaking = false
            io.holdWrites = false
        }
        // Held PUBACKs are discarded with the connection: the broker redelivers.
        pending.dropHeld()
        failAll(.connectionLost(reason), includingPublishes: configuration.failsPublishesOnLoss)
        report(.disconnected(reason))
    }

    func handleConnack(_ rc: Int32, flags: Int32, capabilities: BrokerCapabilities) {
        io?.connectDeadline = nil
        io?.tlsHandshaking = false
        guard state == .connecting else { return }
        if rc == 0 {
            if configuration.forgetsWillOnceConnected, let io { mosquitto_will_clear(io.mosq) }
            state = .connected
            let result = ConnectResult(sessionPresent: flags & 1 != 0, capabilities: capabilities)
            settleConnect(.success(result))
            report(.connected(result))
        } else {
            // libmosquitto closes the connection right after (on_disconnect follows).
            let reason = Self.connackReason(rc, protocolVersion: configuration.protocolVersion)
            settleConnect(.failure(.connectionRefused(reason)))
        }
    }

    /// Hands the outcome of a connect to its waiter, or keeps it for the waiter to come.
    private func settleConnect(_ outcome: Result<ConnectResult, MosquittoError>) {
        pending.connackArrived(outcome)?.resume(with: outcome.mapError { $0 as any Error })
    }

    /// v3.1.1 CONNACK return codes 1...5, as their v5 equivalents.
    static func connackReason(_ rc: Int32, protocolVersion: ProtocolVersion) -> ReasonCode {
        if protocolVersion == .v311 || rc < 0x80 {
            switch rc {
            case 1: return ReasonCode(0x84)  // unacceptable protocol version
            case 2: return ReasonCode(0x85)  // identifier rejected
            case 3: return ReasonCode(0x88)  // server unavailable
            case 4: return .badUsernameOrPassword
            case 5: return .notAuthorized
            default: break
            }
        }
        return ReasonCode(UInt8(clamping: rc))
    }

    func handleDisconnect(_ rc: Int32) {
        if let io { loop.reconcileSocket(io) }
        connectionEnded(aborting ? .aborted : LossReason(disconnectCode: rc))
    }

    /// A read/write/misc call failed. Usually on_disconnect has already reported it; a
    /// failed TLS handshake or a refused TCP connect is only seen here.
    func handleIOFailure(_ rc: Int32) {
        guard state == .connecting || state == .connected || state == .disconnecting else { return }
        if let io, io.socketFD >= 0, mosquitto_socket(io.mosq) >= 0 {
            // The socket is still open: a transient error, the connection goes on.
            return
        }
        connectionEnded(aborting ? .aborted : .error(code: rc, message: MosquittoError.text(of: rc)))
    }

    nonisolated func ioFailed(_ rc: Int32) {
        assumeIsolated { $0.handleIOFailure(rc) }
    }

    nonisolated func connectTimedOut() {
        assumeIsolated { client in
            guard client.state == .connecting else { return }
            client.settleConnect(.failure(.connectTimeout))
            client.abort()
            if client.state == .connecting {
                client.connectionEnded(.error(code: Int32(MOSQ_ERR_TIMEOUT.rawValue), message: "connect timeout"))
            }
        }
    }

    func handlePublished(_ mid: Int32, reason: Int32) {
        guard let settled = pending.published(mid, reason: reason) else { return }
        releaseSlot()
        settled.waiter?.resume(settled.outcome)
    }

    func handleMessage(_ received: MosquittoMessage) {
        var received = received
        if received.qos != .atMostOnce {
            received.deliveryID = pending.nextDeliveryID()
        }
        if let messageHandler {
            if messageHandler(received) == .later { hold(received) }
        } else {
            hold(received)
            messageSink.yield(received)
        }
    }

    /// In `.manual` mode, holds the writes (and so the PUBACK) until `message` is acknowledged.
    private func hold(_ message: MosquittoMessage) {
        guard message.qos != .atMostOnce, configuration.acknowledgement == .manual, let io else { return }
        pending.hold(message.deliveryID)
        io.holdWrites = true
    }

    private func report(_ event: Event) {
        if let eventHandler {
            eventHandler(event)
        } else {
            eventSink.yield(event)
        }
    }

    func handleSubscribed(_ mid: Int32, codes: [ReasonCode]) {
        pending.subackArrived(mid, codes: codes)?.resume(returning: codes)
    }

    func handleUnsubscribed(_ mid: Int32) {
        pending.unsubackArrived(mid)?.resume()
    }
}
