import Foundation
import IMArchive
import IMWire
import Logging
import Mosquitto
import NIOCore
import Synchronization

/// A logged-in device's requests that wait for the broker's answer before their ACK:
/// read receipts, presence and location operations, generic publish/subscribe. They run
/// one after the other on the connection's request lane (a ``SerialJobQueue``), and their answers come back as
/// mail; chat and delivery ACKs take
/// the connection's faster path and never wait behind them.
struct DeviceRequests: Sendable {
    /// One request, with the header of its frame (for the reply).
    enum Job: Sendable {
        case receipt(ReadReceipt)
        case watch([String])
        case unwatch([String])
        case shareStart(LocationShareStart)
        case shareStop
        /// A position (already past the rate limit): checked against the share (PROTOCOL.md 6.7).
        case locationUpdate(LocationUpdate)
        case locationWatch([String])
        case locationUnwatch([String])
        case subscribe(Subscribe)
        case unsubscribe(Unsubscribe)
        case publish(Publish)
        /// A typing state (already past the rate limit).
        case typing(Typing)
        /// A page of a conversation's history.
        case history(HistoryQuery)
        /// A page of the conversation list.
        case conversations(ConversationsQuery)
        /// A read marker moved.
        case readMarker(ReadMarkerUpdate)
        /// A message of the user deleted for everyone.
        case delete(MessageDelete)
    }

    let session: any DeviceSession
    let context: GatewayContext
    /// What publishes a deletion's stored tombstones, through the gateway's own session if
    /// the device's cannot.
    let acceptance: ChatAcceptance
    /// The connection's mailbox, for what its event loop must see in order with the
    /// broker's messages.
    let mailbox: ConnectionMailbox
    let logger: ConnectionLogger
    /// What the device holds of `limits.max_subscriptions` and `max_watches`.
    let quota: Quota
    /// What the session's CONNACK made of the broker.
    let brokerFit: BrokerFit

    /// The device's ``SubscriptionQuota``, shared by its jobs.
    final class Quota: Sendable {
        let state: Mutex<SubscriptionQuota>

        init(_ limits: GatewayConfiguration.LimitSettings) {
            state = Mutex(SubscriptionQuota(maxSubscriptions: limits.maxSubscriptions, maxWatches: limits.maxWatches))
        }
    }

    init(
        session: any DeviceSession, context: GatewayContext, acceptance: ChatAcceptance, brokerFit: BrokerFit,
        mailbox: ConnectionMailbox, logger: ConnectionLogger
    ) {
        self.session = session
        self.context = context
        self.acceptance = acceptance
        self.brokerFit = brokerFit
        self.mailbox = mailbox
        self.logger = logger
        self.quota = Quota(context.configuration.limits)
    }

    /// Answers the request with `header`: the answer goes to the connection as mail, and its
    /// event loop writes it (the channel has one writer).
    func reply(_ ack: Ack, to header: IMFrameHeader) {
        mailbox.post(.replied(ack, sessionID: header.sessionID))
    }

    private func limitReached(_ header: IMFrameHeader, _ what: String) {
        reply(Ack.refusing(sequence: header.sequence, code: .limitReached, message: what), to: header)
    }

    /// Runs `job` and answers the frame with `header`: ACK, or a negative ACK saying why.
    func run(_ job: Job, header: IMFrameHeader) async {
        do {
            try await perform(job, header: header)
        } catch let error as IMIdentifierError {
            reply(Ack.refusing(sequence: header.sequence, code: .invalidUserID, message: "\(error)"), to: header)
        } catch let error as ArchiveError {
            // A group's members could not be read from the archive: later.
            reply(Ack.storeUnavailable(sequence: header.sequence, retryAfter: error.retryAfter ?? 1_000, message: error.message), to: header)
        } catch {
            reply(Ack.refusing(sequence: header.sequence, code: .brokerUnavailable, message: "\(error)"), to: header)
        }
    }

    private func perform(_ job: Job, header: IMFrameHeader) async throws {
        let shares = context.shares
        let me = session.user
        switch job {
        case .receipt(let receipt):
            try IMIdentifier.validate(receipt.to, kind: .user)
            try await session.publish(session.receipt(.read, to: receipt.to, messageIDs: [receipt.messageID]))
            reply(Ack(sequence: header.sequence, messageID: receipt.messageID), to: header)
        case .watch(let users):
            // The retained presence of every device of the watched users arrives at
            // once, then every change (PRESENCE notices).
            for user in users { try IMIdentifier.validate(user, kind: .user) }
            guard quota.state.withLock({ $0.admit(watches: users, .presence) }) else {
                return limitReached(header, "at most \(context.configuration.limits.maxWatches) watched users per device")
            }
            mailbox.post(.presenceWatchChanged(users, watching: true))
            let results: [MosquittoClient.SubscriptionResult]
            do {
                results = try await session.subscribe(users.map { .init(context.topics.presenceFilter(user: $0), qos: .atLeastOnce) })
            } catch {
                quota.state.withLock { $0.release(watches: users, .presence) }
                throw error
            }
            let rejected = zip(users, results).filter { if case .rejected = $0.1 { true } else { false } }.map(\.0)
            if !rejected.isEmpty { quota.state.withLock { $0.release(watches: rejected, .presence) } }
            // (The user's own devices too: their retained presence on another node misses
            // this session's filter just the same.)
            await probePresence(of: users.filter { !rejected.contains($0) })
            reply(rejected.isEmpty ? Ack(sequence: header.sequence) : Ack.refusing(sequence: header.sequence, code: .forbidden), to: header)
        case .unwatch(let users):
            // The user's own presence stays subscribed (carbons); its notices stop.
            mailbox.post(.presenceWatchChanged(users, watching: false))
            try await session.unsubscribe(users.filter { IMIdentifier.isValid($0) && $0 != me }.map { context.topics.presenceFilter(user: $0) })
            quota.state.withLock { $0.release(watches: users, .presence) }
            reply(Ack(sequence: header.sequence), to: header)
        case .shareStart(let start):
            for user in start.audience { try IMIdentifier.validate(user, kind: .user) }
            let share = shares.start(sharer: me, audience: Set(start.audience), duration: Double(start.duration))
            let duration = UInt32(share.remaining(now: Date.now.timeIntervalSince1970).rounded(.up))
            try await session.publishShare(audience: start.audience, until: UInt64(share.expiresAt * 1000), duration: duration)
            reply(Ack(sequence: header.sequence), to: header)
        case .shareStop:
            shares.stop(sharer: me)
            try await session.clearShare()
            reply(Ack(sequence: header.sequence), to: header)
        case .locationUpdate(let update):
            let location = context.configuration.location
            guard let share = shares.isSharing(me) else {
                return reply(Ack.refusing(sequence: header.sequence, code: .forbidden, message: "start sharing first"), to: header)
            }
            // Shares expire on the wall clock (every gateway sees the same expiry).
            let left = UInt32(share.remaining(now: Date.now.timeIntervalSince1970).rounded(.up))
            try await session.publishLocation(update, expiry: min(UInt32(clamping: location.retainExpiry), left))
            reply(Ack(sequence: header.sequence), to: header)
        case .locationWatch(let users):
            for user in users { try IMIdentifier.validate(user, kind: .user) }
            let refused = users.filter { !shares.canWatch(watcher: me, sharer: $0) }
            guard refused.isEmpty else {
                reply(Ack.refusing(sequence: header.sequence, code: .forbidden,
                    message: "not in the audience of \(refused.joined(separator: ", "))"), to: header)
                return
            }
            guard quota.state.withLock({ $0.admit(watches: users, .location) }) else {
                return limitReached(header, "at most \(context.configuration.limits.maxWatches) watched users per device")
            }
            do {
                _ = try await session.subscribe(users.map { .init(context.topics.location(user: $0), qos: .atMostOnce) })
            } catch {
                quota.state.withLock { $0.release(watches: users, .location) }
                throw error
            }
            reply(Ack(sequence: header.sequence), to: header)
        case .locationUnwatch(let users):
            try await session.unsubscribe(users.filter { IMIdentifier.isValid($0) }.map { context.topics.location(user: $0) })
            quota.state.withLock { $0.release(watches: users, .location) }
            reply(Ack(sequence: header.sequence), to: header)
        case .subscribe(let subscribe):
            try await self.subscribe(subscribe, header: header)
        case .unsubscribe(let unsubscribe):
            let filters = unsubscribe.filters.compactMap { try? context.topics.pubsubFilter($0) }
            if !filters.isEmpty { try await session.unsubscribe(filters) }
            quota.state.withLock { $0.release(filters: filters) }
            reply(Ack(sequence: header.sequence), to: header)
        case .publish(let publish):
            try await self.publish(publish, header: header)
        case .typing(let typing):
            try await self.typing(typing, header: header)
        case .history(let query):
            try await history(query, header: header)
        case .conversations(let query):
            try await conversations(query, header: header)
        case .readMarker(let marker):
            try await readMarker(marker, header: header)
        case .delete(let request):
            try await delete(request, header: header)
        }
    }

    /// Asks the online devices of `users` for their presence (`broker.presence_probe`): on a
    /// cluster whose nodes keep retained messages apart, the retained presence published
    /// through another node does not reach the new subscription, but their answers do. The
    /// watch stands without them: a failure is logged.
    private func probePresence(of users: [String]) async {
        guard context.configuration.broker.presenceProbe, !users.isEmpty else { return }
        do {
            try await session.publishAll(session.presenceProbes(users), window: brokerFit.publishWindow)
        } catch {
            logger.notice("presence probes not published", metadata: ["error": "\(error)", "users": "\(users.count)"])
        }
    }

    /// A typing state (PROTOCOL.md 6.13) to the user's or every other group member's signal
    /// topic, at QoS 0 with the state's lifetime as message expiry: online devices only.
    private func typing(_ typing: Typing, header: IMFrameHeader) async throws {
        let me = session.user
        let recipients: [String]
        if let group = typing.group {
            try IMIdentifier.validate(group, kind: .group)
            let members = try await context.groups.members(of: group)
            guard members[me] != nil else {
                return reply(Ack.refusing(sequence: header.sequence, code: .forbidden, message: "\(me) is not a member of \(group)"), to: header)
            }
            recipients = members.keys.filter { $0 != me }.sorted()
        } else {
            let to = typing.to ?? ""
            try IMIdentifier.validate(to, kind: .user)
            recipients = [to]
        }
        let bytes = PayloadCodec.encode(TypingPayload(from: me, group: typing.group, state: typing.state, ts: unixMilliseconds()))
        let publishes = recipients.map { user in
            let topic = context.topics.signal(user: user)
            return OutgoingPublish(
                topic: topic, payload: bytes, qos: .atMostOnce,
                properties: .gateway(sender: me, expiry: TypingState.lifetime, tag: context.authenticator.tag(topic: topic, payload: bytes)))
        }
        try await session.publishAll(publishes, window: brokerFit.publishWindow)
        reply(Ack(sequence: header.sequence), to: header)
    }

    /// Generic subscribe inside the configured topic space (PROTOCOL.md 6.8): one result
    /// per filter, refused ones named.
    private func subscribe(_ subscribe: Subscribe, header: IMFrameHeader) async throws {
        let policy = context.configuration.pubsub
        let maxQoS = policy.maxIMQoS
        var results = [SubscriptionResult?](repeating: nil, count: subscribe.subscriptions.count)
        var wanted: [(index: Int, subscription: MosquittoClient.Subscription)] = []
        for (index, request) in subscribe.subscriptions.enumerated() {
            guard policy.allowSubscribe else {
                results[index] = SubscriptionResult(filter: request.filter, outcome: .refused(.forbidden))
                continue
            }
            guard let filter = try? context.topics.pubsubFilter(request.filter) else {
                results[index] = SubscriptionResult(filter: request.filter, outcome: .refused(.invalidTopic))
                continue
            }
            // Never above QoS 1 on the broker: libmosquitto sends PUBREC for a QoS 2
            // PUBLISH before it hands the message over (only at PUBREL), so ack-through
            // cannot hold it, and a message the device had not ACKed when its session
            // ended was gone. At QoS 1 the PUBACK waits for the device's ACK and the broker
            // redelivers (PROTOCOL.md 6.8: at least once, RESEND on a redelivery).
            let qos = QoS(min(request.qos, maxQoS, .atLeastOnce))
            wanted.append((index, .init(filter, qos: qos)))
        }
        // The device's limit: what does not fit is refused here and never reaches the broker.
        let fits = quota.state.withLock { $0.admit(filters: wanted.map(\.subscription.filter)) }
        for (entry, fit) in zip(wanted, fits) where !fit {
            results[entry.index] = SubscriptionResult(filter: subscribe.subscriptions[entry.index].filter, outcome: .refused(.limitReached))
        }
        wanted = zip(wanted, fits).filter(\.1).map(\.0)
        if !wanted.isEmpty {
            let granted: [MosquittoClient.SubscriptionResult]
            do {
                granted = try await session.subscribe(wanted.map(\.subscription))
            } catch {
                quota.state.withLock { $0.release(filters: wanted.map(\.subscription.filter)) }
                throw error
            }
            for (position, entry) in wanted.enumerated() {
                let filter = subscribe.subscriptions[entry.index].filter
                switch granted[position] {
                case .granted(let qos):
                    results[entry.index] = SubscriptionResult(filter: filter, outcome: .granted(IMQoS(qos)))
                case .rejected(let reason):
                    quota.state.withLock { $0.release(filters: [entry.subscription.filter]) }
                    // The broker's words: the code says only which kind.
                    results[entry.index] = SubscriptionResult(
                        filter: filter, outcome: .refused(Self.code(refusal: reason)), reason: "the broker refused it: \(reason)")
                }
            }
        }
        reply(Ack(sequence: header.sequence, subscriptions: results.compactMap { $0 }), to: header)
    }

    /// The device's code for a filter the broker refused (SUBACK reason): FORBIDDEN when it is
    /// not authorised, INVALID_TOPIC when it cannot take such a filter (too deep, a wildcard
    /// or shared subscription it does not support), LIMIT_REACHED for its quota,
    /// BROKER_UNAVAILABLE otherwise.
    static func code(refusal reason: ReasonCode) -> IMErrorCode {
        switch reason {
        case .notAuthorized: .forbidden
        case .topicFilterInvalid, .sharedSubscriptionsNotSupported, .subscriptionIdentifiersNotSupported,
             .wildcardSubscriptionsNotSupported: .invalidTopic
        case .quotaExceeded: .limitReached
        default: .brokerUnavailable
        }
    }

    /// Generic publish inside the configured topic space (PROTOCOL.md 6.8).
    private func publish(_ publish: Publish, header: IMFrameHeader) async throws {
        let policy = context.configuration.pubsub
        let maxQoS = min(policy.maxIMQoS, IMQoS(brokerFit.maximumQoS))
        guard policy.allowPublish else {
            reply(Ack.refusing(sequence: header.sequence, code: .forbidden, message: "publishing is not allowed"), to: header)
            return
        }
        guard let topic = try? context.topics.pubsubTopic(publish.topic) else {
            reply(Ack.refusing(sequence: header.sequence, code: .invalidTopic,
                message: "\(publish.topic) is outside \(context.configuration.topicPrefix)/\(policy.topicSpace)/"), to: header)
            return
        }
        guard publish.qos <= maxQoS else {
            let whose = maxQoS < policy.maxIMQoS ? "the broker takes" : "pubsub.max_qos allows"
            reply(Ack.refusing(sequence: header.sequence, code: .qosNotSupported, message: "\(whose) at most QoS \(maxQoS.rawValue)"), to: header)
            return
        }
        try await session.publish(OutgoingPublish(
            topic: topic, payload: Array(publish.payload.readableBytesView), qos: QoS(publish.qos),
            retain: publish.retain, properties: MQTTProperties(userProperties: [UserProperty("sender", session.user)])))
        reply(Ack(sequence: header.sequence, serverTime: unixMilliseconds()), to: header)
    }
}
