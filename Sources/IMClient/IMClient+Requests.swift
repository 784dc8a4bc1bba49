import IMWire
import NIOCore

// What the application asks of the gateway: chat, receipts, presence, location, pub/sub.
extension IMClient {
    // MARK: Chat and receipts

    /// Sends a text message to `user` and returns once the gateway has accepted it (its
    /// broker has it), however many retransmissions and reconnects that takes.
    ///
    /// - Parameter messageID: Unique per sending user (across all of the user's devices); kept
    ///   across retransmissions, so the recipient gets the message once. Default: a new UUID.
    /// - Throws: ``IMClientError/refused(_:_:)`` (e.g. INVALID_USER_ID, FORBIDDEN;
    ///   MESSAGE_ID_REUSED when the gateway accepted `messageID` for another message lately:
    ///   nothing was sent, send it with a new id; RATE_LIMITED and BROKER_UNAVAILABLE are
    ///   retried until ``Configuration/sendTimeout``),
    ///   ``IMClientError/timeout`` (not accepted within ``Configuration/sendTimeout``), or
    ///   ``IMClientError/disconnected`` (the client was closed, kicked or logged out first).
    @discardableResult
    public func send(to user: String, text: String, messageID: String = IMClient.makeMessageID()) async throws(IMClientError) -> SendReceipt {
        try await send(to: user, content: .text(text), messageID: messageID)
    }

    /// Sends a message with any content (text, or bytes tagged image, file, custom ...) to
    /// `user`; see ``send(to:text:messageID:)``.
    @discardableResult
    public func send(to user: String, content: IMContent, messageID: String = IMClient.makeMessageID()) async throws(IMClientError) -> SendReceipt {
        let chat = ChatSend(to: user, messageID: messageID, content: content)
        let ack = try await request(.chat(chat), priority: .chat, durable: true, timeout: configuration.sendTimeout)
        return SendReceipt(messageID: ack.messageID ?? messageID, serverTime: ack.serverTime, streamOffset: ack.streamOffset)
    }

    /// Sends a text message to every member of `group` (PROTOCOL.md 6.11), like
    /// ``send(to:text:messageID:)``; FORBIDDEN when this user is not a member.
    @discardableResult
    public func send(toGroup group: String, text: String, messageID: String = IMClient.makeMessageID()) async throws(IMClientError) -> SendReceipt {
        try await send(toGroup: group, content: .text(text), messageID: messageID)
    }

    /// Sends a message with any content to every member of `group`.
    @discardableResult
    public func send(toGroup group: String, content: IMContent, messageID: String = IMClient.makeMessageID()) async throws(IMClientError) -> SendReceipt {
        let chat = ChatSend(group: group, messageID: messageID, content: content)
        let ack = try await request(.chat(chat), priority: .chat, durable: true, timeout: configuration.sendTimeout)
        return SendReceipt(messageID: ack.messageID ?? messageID, serverTime: ack.serverTime, streamOffset: ack.streamOffset)
    }

    /// Tells `user` (or, with `group`, its other members) what this user is doing in the
    /// conversation (PROTOCOL.md 6.13): reaches their online devices only, and holds for
    /// ``TypingState/lifetime`` seconds, so say `.typing` again while typing goes on. Not
    /// retried: a lost signal is replaced by the next. The gateway takes 4 a second.
    /// - Throws: ``IMClientError/refused(_:_:)`` (RATE_LIMITED, FORBIDDEN for a group this
    ///   user is not in), ``IMClientError/timeout``, ``IMClientError/disconnected``.
    public func sendTyping(_ state: TypingState, to user: String) async throws(IMClientError) {
        _ = try await request(.typing(Typing(to: user, state: state)), priority: .receipt, durable: false, timeout: configuration.ackTimeout)
    }

    /// ``sendTyping(_:to:)`` in a group conversation.
    public func sendTyping(_ state: TypingState, inGroup group: String) async throws(IMClientError) {
        _ = try await request(.typing(Typing(group: group, state: state)), priority: .receipt, durable: false, timeout: configuration.ackTimeout)
    }

    /// Tells `sender` that this user read their message `messageID` (a RECEIPT), reliably
    /// like a chat message.
    public func sendReadReceipt(to sender: String, messageID: String) async throws(IMClientError) {
        _ = try await request(.readReceipt(ReadReceipt(to: sender, messageID: messageID)), priority: .receipt, durable: true, timeout: configuration.sendTimeout)
    }

    // MARK: Presence

    /// Watches the presence of `users`: ``events`` yields the current state of each of their
    /// devices, then every change. The watch is restored after every reconnect.
    /// - Throws: ``IMClientError/refused(_:_:)`` (FORBIDDEN, INVALID_USER_ID),
    ///   ``IMClientError/timeout``, ``IMClientError/disconnected`` (not connected now; the
    ///   watch is still made at the next login).
    public func watchPresence(_ users: [String]) async throws(IMClientError) {
        presenceWatches.formUnion(users)
        do {
            _ = try await request(.presenceWatch(PresenceWatch(users: users)), priority: .presence, durable: false, timeout: configuration.ackTimeout)
        } catch .refused(let code, let message) {
            presenceWatches.subtract(users)
            throw .refused(code, message)
        }
    }

    /// Stops watching the presence of `users`.
    public func unwatchPresence(_ users: [String]) async throws(IMClientError) {
        presenceWatches.subtract(users)
        _ = try await request(.presenceUnwatch(PresenceUnwatch(users: users)), priority: .presence, durable: false, timeout: configuration.ackTimeout)
    }

    // MARK: Location

    /// Starts sharing this device's position with `audience` for `duration` (the gateway
    /// caps it); send positions with ``updateLocation(_:)``. Restored after a reconnect for
    /// the time that is left.
    public func shareLocation(with audience: [String], for duration: Duration) async throws(IMClientError) {
        let seconds = UInt32(clamping: duration.components.seconds)
        _ = try await request(.locationShareStart(LocationShareStart(audience: audience, duration: seconds)), priority: .location, durable: false, timeout: configuration.ackTimeout)
        locationShare = (audience, clock.now + duration)
    }

    /// Sends this device's position to the audience of the current share. Positions are a
    /// stream (QoS 0): one waiting to be written is replaced by a newer one, and a position
    /// is not sent again after a reconnect.
    /// - Throws: ``IMClientError/refused(_:_:)`` (BAD_REQUEST when not sharing),
    ///   ``IMClientError/disconnected`` (not connected).
    public func updateLocation(_ location: IMLocation) async throws(IMClientError) {
        _ = try await request(.locationUpdate(LocationUpdate(location: location)), priority: .location, durable: false, coalescingKey: "location", timeout: configuration.ackTimeout)
    }

    /// Stops sharing this device's position.
    public func stopSharingLocation() async throws(IMClientError) {
        locationShare = nil
        _ = try await request(.locationShareStop(LocationShareStop()), priority: .location, durable: false, timeout: configuration.ackTimeout)
    }

    /// Follows the positions `users` share with this user: ``events`` yields
    /// ``Event/location(_:)``. Restored after every reconnect.
    public func watchLocation(_ users: [String]) async throws(IMClientError) {
        locationWatches.formUnion(users)
        do {
            _ = try await request(.locationWatch(LocationWatch(users: users)), priority: .location, durable: false, timeout: configuration.ackTimeout)
        } catch .refused(let code, let message) {
            locationWatches.subtract(users)
            throw .refused(code, message)
        }
    }

    /// Stops following the positions of `users`.
    public func unwatchLocation(_ users: [String]) async throws(IMClientError) {
        locationWatches.subtract(users)
        _ = try await request(.locationUnwatch(LocationUnwatch(users: users)), priority: .location, durable: false, timeout: configuration.ackTimeout)
    }

    // MARK: Pub/sub

    /// Publishes `payload` on `topic` (inside `im/t/`, under the gateway's policy). QoS 0
    /// returns once the gateway took it; QoS 1 and 2 once its broker has it, and are kept in
    /// the outbox across reconnects like chat messages.
    public func publish(topic: String, payload: [UInt8], qos: IMQoS = .atMostOnce, retain: Bool = false) async throws(IMClientError) {
        let message = Publish(topic: topic, payload: ByteBuffer(bytes: payload), qos: qos, retain: retain)
        let durable = qos != .atMostOnce
        _ = try await request(.publish(message), priority: .pubsub, durable: durable, timeout: durable ? configuration.sendTimeout : configuration.ackTimeout)
    }

    /// Subscribes to `filters` with maximum QoS `qos`: ``events`` yields
    /// ``Event/publication(_:)``. Returns the gateway's answer per filter (granted QoS or
    /// refusal); granted filters are restored after every reconnect.
    @discardableResult
    public func subscribe(_ filters: [String], qos: IMQoS = .atLeastOnce) async throws(IMClientError) -> [SubscriptionResult] {
        let request = Subscribe(subscriptions: filters.map { Subscribe.Subscription(filter: $0, qos: qos) })
        let ack = try await self.request(.subscribe(request), priority: .pubsub, durable: false, timeout: configuration.ackTimeout)
        for result in ack.subscriptions {
            if case .granted = result.outcome { subscriptions[result.filter] = qos }
        }
        return ack.subscriptions
    }

    /// Unsubscribes from `filters`.
    public func unsubscribe(_ filters: [String]) async throws(IMClientError) {
        for filter in filters { subscriptions[filter] = nil }
        _ = try await request(.unsubscribe(Unsubscribe(filters: filters)), priority: .pubsub, durable: false, timeout: configuration.ackTimeout)
    }

    // MARK: The outbox

    /// Puts `message` in the outbox and waits for its ACK (positive: returned; negative:
    /// thrown as ``IMClientError/refused(_:_:)``).
    ///
    /// Durable requests wait across reconnects (also while disconnected) until `timeout`;
    /// the others need the connection now and fail with ``IMClientError/disconnected`` if it
    /// is lost before their ACK.
    func request(
        _ message: IMMessage, priority: OutboxPriority, durable: Bool, coalescingKey: String? = nil, timeout: Duration?
    ) async throws(IMClientError) -> Ack {
        let id = try enqueue(message, priority: priority, durable: durable, coalescingKey: coalescingKey, timeout: timeout)
        return try await outcome(of: id)
    }

    /// Puts `message` in the outbox (and starts writing it if connected); its outcome is
    /// then awaited with ``outcome(of:)``, exactly once.
    func enqueue(
        _ message: IMMessage, priority: OutboxPriority, durable: Bool, coalescingKey: String? = nil, timeout: Duration?
    ) throws(IMClientError) -> OutboxEntry.ID {
        guard !machine.isFinished else { throw .disconnected }
        guard durable || machine.state == .connected else { throw .disconnected }
        let (id, replaced) = outbox.enqueue(message, priority: priority, durable: durable, coalescingKey: coalescingKey)
        for old in replaced {
            // A newer position took its place: the older one's caller is done.
            let superseded = Result<Ack, IMClientError>.success(Ack(sequence: 0))
            if let waiter = waiters.removeValue(forKey: old) {
                waiter.resume(returning: superseded)
            } else if unclaimed.contains(old) {
                early[old] = superseded
            }
        }
        unclaimed.insert(id)
        if let timeout {
            Task { [weak self] in
                try? await Task.sleep(for: timeout)
                await self?.giveUp(id)
            }
        }
        pump()
        return id
    }

    /// Waits for the ACK of the outbox entry `id` (positive: returned; negative: thrown as
    /// ``IMClientError/refused(_:_:)``).
    func outcome(of id: OutboxEntry.ID) async throws(IMClientError) -> Ack {
        if let store = configuration.outboxStore, let entry = outbox.entry(id), entry.durable {
            try? await store.save(entry)
            if early[id] != nil || outbox.entry(id) == nil { try? await store.remove(id) }
        }
        let outcome = await withCheckedContinuation { (waiter: Waiter) in
            unclaimed.remove(id)
            if let outcome = early.removeValue(forKey: id) {
                waiter.resume(returning: outcome)
            } else {
                waiters[id] = waiter
            }
        }
        let ack = try outcome.get()
        if let code = ack.error { throw .refused(code, ack.errorMessage) }
        return ack
    }

    /// Queues a chat message and returns at once, in call order with other sends: a
    /// stream of messages keeps its order without waiting for each ACK. The task finishes
    /// like ``send(to:content:messageID:)``: with the receipt once the gateway ACKed it.
    public func post(to user: String, content: IMContent, messageID: String = IMClient.makeMessageID()) throws(IMClientError) -> Task<SendReceipt, any Error> {
        let id = try enqueue(.chat(ChatSend(to: user, messageID: messageID, content: content)), priority: .chat, durable: true, timeout: configuration.sendTimeout)
        return Task {
            let ack = try await self.outcome(of: id)
            return SendReceipt(messageID: ack.messageID ?? messageID, serverTime: ack.serverTime, streamOffset: ack.streamOffset)
        }
    }

    /// The request `id` ran out of time: out of the outbox, its caller gets
    /// ``IMClientError/timeout``.
    func giveUp(_ id: OutboxEntry.ID) {
        let removed = outbox.cancel(id) != nil || deferred.contains { $0.id == id }
        deferred.removeAll { $0.id == id }
        guard let waiter = waiters.removeValue(forKey: id) else { return }
        if removed, let store = configuration.outboxStore {
            Task { try? await store.remove(id) }
        }
        waiter.resume(returning: .failure(.timeout))
    }

    /// An ACK from the gateway: the heartbeat's, or an outbox entry's.
    func settle(_ ack: Ack) {
        let now = clock.now
        heartbeat?.ackReceived(sequence: ack.sequence, at: now)
        guard let entry = outbox.acknowledge(sequence: ack.sequence) else { return }
        if ack.error == nil { acknowledged(entry, ack) }
        if ack.error == .rateLimited || ack.error == .storeUnavailable, entry.priority == .chat {
            // Chat faster than the gateway's limit: this one goes back to its place, and no
            // chat is written until the gateway's RETRY_AFTER has passed; it refuses every
            // chat until then, so those in flight behind this one come back too, and all go
            // again in their order.
            outbox.restore([entry])
            retriedRefusals += 1
            let pause = Duration.milliseconds(Int64(ack.retryAfter ?? 1000))
            chatPausedUntil = max(chatPausedUntil ?? now, now + pause)
            schedule()
            return
        }
        if let code = ack.error, entry.durable, [IMErrorCode.rateLimited, .brokerUnavailable].contains(code) {
            // "Later": the gateway could not take it now. Back in the outbox after a pause.
            retriedRefusals += 1
            deferred.append((entry.id, entry, now + .seconds(1)))
            schedule()
            return
        }
        if entry.durable, let store = configuration.outboxStore {
            Task { try? await store.remove(entry.id) }
        }
        if restoring.remove(entry.id) != nil, let code = ack.error {
            eventSink.yield(.error(code, "restoring watches after reconnecting: \(ack.errorMessage ?? code.description)"))
        }
        let outcome = Result<Ack, IMClientError>.success(ack)
        if let waiter = waiters.removeValue(forKey: entry.id) {
            waiter.resume(returning: outcome)
        } else if unclaimed.contains(entry.id) {
            early[entry.id] = outcome
        }
        pump()
    }

    /// What a positive ACK tells of the stream: where this device's own chat was stored, or
    /// how far a SYNC caught it up.
    private func acknowledged(_ entry: OutboxEntry, _ ack: Ack) {
        switch entry.message {
        case .chat:
            if let offset = ack.streamOffset { _ = router.cursor.received(offset) }
        case .sync:
            guard let offset = ack.streamOffset, let epoch = ack.streamEpoch else { return }
            router.cursor.caughtUp(through: offset, epoch: epoch)
            let result = SyncResult(position: StreamPosition(epoch: epoch, offset: router.cursor.offset),
                                    status: ack.syncStatus ?? .continued, replayed: router.replayed)
            router.replayed = 0
            lastSync = result
            eventSink.yield(.synced(result))
        default:
            break
        }
    }

    /// Asks the gateway to catch this device up now, from its position, without waiting
    /// (``Event/synced(_:)`` says when it is done).
    func startSync() {
        router.replayed = 0
        // Nobody waits for this one: its outcome is dropped (the event tells it).
        if let id = try? enqueue(.sync(Sync(position: router.cursor.position)), priority: .chat, durable: false, timeout: nil) {
            unclaimed.remove(id)
        }
    }

    /// Asks a gateway with a message archive to deliver every stored message this device
    /// has not had (seed 003's "redundant sync": call it when the app comes to the
    /// foreground); returns once they have all come (before the return, as
    /// ``Event/message(_:)`` events with ``Message/isArchived``), with where the device is now.
    ///
    /// - Throws: ``IMClientError/refused(_:_:)`` with STORE_UNAVAILABLE (try later) or
    ///   UNKNOWN_OPERATION (the gateway keeps no archive); ``IMClientError/disconnected``.
    public func sync() async throws(IMClientError) -> SyncResult {
        router.replayed = 0
        lastSync = nil
        _ = try await request(.sync(Sync(position: router.cursor.position)), priority: .chat, durable: false, timeout: nil)
        guard let lastSync else { throw .refused(.badRequest, "the gateway's SYNC ACK carries no STREAM_EPOCH or STREAM_OFFSET") }
        return lastSync
    }

    /// After a reconnect: watches, subscriptions and the location share again (nobody
    /// waits for these; a refusal is reported as ``Event/error(_:_:)``).
    func restoreRegistrations() {
        var messages: [(IMMessage, OutboxPriority)] = []
        if !presenceWatches.isEmpty {
            messages.append((.presenceWatch(PresenceWatch(users: presenceWatches.sorted())), .presence))
        }
        if !locationWatches.isEmpty {
            messages.append((.locationWatch(LocationWatch(users: locationWatches.sorted())), .location))
        }
        if let share = locationShare {
            let left = share.until - clock.now
            if left >= .seconds(1) {
                let seconds = UInt32(clamping: left.components.seconds)
                messages.append((.locationShareStart(LocationShareStart(audience: share.audience, duration: seconds)), .location))
            } else {
                locationShare = nil
            }
        }
        if !subscriptions.isEmpty {
            let all = subscriptions.sorted { $0.key < $1.key }.map { Subscribe.Subscription(filter: $0.key, qos: $0.value) }
            messages.append((.subscribe(Subscribe(subscriptions: all)), .pubsub))
        }
        for (message, priority) in messages {
            restoring.insert(outbox.enqueue(message, priority: priority, durable: false).id)
        }
    }
}
