import AsyncToolkit
import IMArchive
import IMWire
import Logging
import Mosquitto
import NIOCore

/// What happens to a chat once its source has checked it (a device's one-to-one or group
/// CHAT, the server API's send to a user or to a group): the one place that stores it (or,
/// without an archive, checks the de-duplication window), publishes its copies, hands it to the
/// offline push and answers the source. Every source goes through ``accept(_:via:logger:answer:)``.
///
/// **A chat the archive holds is published, whatever happens to the connection it came
/// from** (PROTOCOL.md 6.14). Once handed over, a chat does not depend on its source: the
/// archive's commit leads straight to its publishes, which go through the sending device's MQTT
/// session while it can take them, and through the gateway's own session (its control client,
/// the ``relay``) for every copy the device's session could not publish (it ended with its
/// connection, or was lost). The answer (the device's ACK, or the API's response) follows the
/// broker's acknowledgement of every copy; a source that is gone by then simply gets none. A
/// resend of a stored chat is published again with the offsets it has (the recipients'
/// gateways deliver it once), so nothing that was stored stays unpublished because a
/// connection ended between the two. Shutdown waits for the chats under way (``waitUntilIdle()``).
///
/// Without an archive the de-duplication window (``DedupStore``) takes its place: a resend of
/// an accepted id is answered at once, an id reused for another message is refused, a new one
/// is recorded once the broker has it.
final class ChatAcceptance: Sendable {
    /// A chat handed over by its source. A copy costs one reference count whatever it holds
    /// (the chat path copies it from the connection's queue to the acceptance and into each
    /// step's closure): its fields live in one immutable box, and a change makes another.
    struct Chat: Sendable {
        /// The fields. Immutable, and every field Sendable: sharing it between copies and
        /// threads is safe.
        private final class Fields: Sendable {
            let send: ChatSend
            let from: String
            let device: String?
            let recipients: [String]
            let ownCopy: Bool
            let carbon: Bool
            let serverTime: UInt64
            let window: Int
            /// Computed once (the de-duplication checks it, records it, the archive stores it).
            let fingerprint: ChatFingerprint

            init(send: ChatSend, from: String, device: String?, recipients: [String], ownCopy: Bool, carbon: Bool, serverTime: UInt64, window: Int) {
                self.fingerprint = ChatFingerprint(send)
                self.send = send
                self.from = from
                self.device = device
                self.recipients = recipients
                self.ownCopy = ownCopy
                self.carbon = carbon
                self.serverTime = serverTime
                self.window = window
            }
        }

        private var fields: Fields

        init(send: ChatSend, from: String, device: String?, recipients: [String], ownCopy: Bool, carbon: Bool, serverTime: UInt64, window: Int) {
            fields = Fields(send: send, from: from, device: device, recipients: recipients, ownCopy: ownCopy, carbon: carbon, serverTime: serverTime, window: window)
        }

        /// What the device (or the API) sent.
        var send: ChatSend { fields.send }
        /// The sender (a device's user, or the server API's `from`).
        var from: String { fields.from }
        /// The device that sent it; `nil` for the server API.
        var device: String? { fields.device }
        /// Who gets a copy: the one-to-one recipient, or the group's other members.
        var recipients: [String] {
            get { fields.recipients }
            set { fields = Fields(send: send, from: from, device: device, recipients: newValue, ownCopy: ownCopy, carbon: carbon, serverTime: serverTime, window: window) }
        }
        /// Whether the sender's stream gets a copy (every chat of a device, with an archive).
        var ownCopy: Bool { fields.ownCopy }
        /// Whether a carbon is published for the sender's other devices.
        var carbon: Bool { fields.carbon }
        /// When the gateway took it, Unix milliseconds (a resend answers with the first one's).
        var serverTime: UInt64 {
            get { fields.serverTime }
            set { fields = Fields(send: send, from: from, device: device, recipients: recipients, ownCopy: ownCopy, carbon: carbon, serverTime: newValue, window: window) }
        }
        /// Publishes waiting for the broker at once, at most.
        var window: Int { fields.window }

        /// What makes the chat this chat (a resend has the same, an id reused for another
        /// message another).
        var fingerprint: ChatFingerprint { fields.fingerprint }
    }

    /// What became of a chat.
    enum Verdict: Sendable, Hashable {
        /// Stored (or, without an archive, new) and published, or a resend of one that was.
        case accepted(Accepted)
        /// The sender used the message id for another message: nothing was stored or sent.
        case reused
        /// The archive could not store it (``ArchiveError/retryAfter``): nothing was sent.
        case storeUnavailable(retryAfter: UInt32, message: String)
        /// No session took every copy (the broker refused or cannot be reached). With an
        /// archive the chat is stored: recipients get it when they catch up, and the sender's
        /// resend publishes it again.
        case notPublished(String)
    }

    /// An accepted chat.
    struct Accepted: Sendable, Hashable {
        /// Its server time (the first one's, for a resend).
        var serverTime: UInt64
        /// Its offset in the sender's own stream (the ACK's STREAM_OFFSET), with an archive.
        var ownOffset: UInt64?
        /// Offsets of the sender's stream that the sending device needs no delivery of: its own
        /// copy, and the recipient's copy of a chat to itself.
        var done: [UInt64]
        /// It was stored (or accepted) before: this was a resend.
        var isRepeat: Bool
        /// Copies published to recipients (not counting the carbon).
        var copies: Int
    }

    private let context: GatewayContext
    /// The gateway's own session: the server API's route, and the one that takes over.
    let relay: any ChatRoute
    /// Chats handed over and not answered yet.
    private let underWay = AsyncCondition(0)

    init(context: GatewayContext, relay: any ChatRoute) {
        self.context = context
        self.relay = relay
    }

    /// Accepts `chat`: stored (or checked against the de-duplication window), published through
    /// `route` (the sending device's session; `nil`: the ``relay``), then `answer` is called once
    /// with the verdict (on any thread). Nothing of it depends on the caller afterwards.
    ///
    /// `stored`, if given, is called once the archive holds the chat and before its copies are
    /// published, with the offsets of the sender's stream that the sending device needs no
    /// delivery of (``Accepted/done``), unless there are none. The sending device's connection
    /// must know them before the publishes: a live delivery above one of them waits for it, and
    /// under ack-through the device's session writes nothing (its own publishes included) while
    /// a delivery waits; the answer, which also carries them, comes only after the broker
    /// acknowledged the publishes.
    func accept(
        _ chat: Chat, via route: (any ChatRoute)?, logger: ConnectionLogger,
        stored: (@Sendable ([UInt64]) -> Void)? = nil, answer: @escaping @Sendable (Verdict) -> Void
    ) {
        underWay.enter()
        let underWay = self.underWay
        let answer: @Sendable (Verdict) -> Void = { verdict in
            answer(verdict)
            underWay.leave()
        }
        if let archive = context.archive {
            let message = archiveMessage(chat)
            archive.append(message) { result in
                self.stored(chat, message, result, epoch: archive.epoch.rawValue, route: route, logger: logger, done: stored, answer: answer)
            }
            return
        }
        switch context.dedup.check(user: chat.from, id: chat.send.messageID, fingerprint: chat.fingerprint) {
        case .duplicate(let earlier):
            answer(.accepted(Accepted(serverTime: earlier ?? chat.serverTime, done: [], isRepeat: true, copies: 0)))
        case .reused:
            answer(refuseReused(chat, logger: logger))
        case .new:
            let recipients = chat.recipients.map { publish(chat, to: $0, offset: nil, epoch: nil) }
            let copies = recipients + (chat.carbon ? [publish(chat, carbonOffset: nil, epoch: nil)] : [])
            self.publish(copies, of: chat.send.messageID, window: chat.window, via: route, logger: logger) { failure in
                if let failure { return answer(.notPublished(failure)) }
                self.context.dedup.record(user: chat.from, id: chat.send.messageID, fingerprint: chat.fingerprint, serverTime: chat.serverTime)
                self.accepted(chat)
                answer(.accepted(Accepted(serverTime: chat.serverTime, done: [], isRepeat: false, copies: recipients.count)))
            }
        }
    }

    /// ``accept(_:via:logger:answer:)``, awaited. Not cancellable: the chat goes its way whatever
    /// the caller does.
    func accept(_ chat: Chat, via route: (any ChatRoute)?, logger: ConnectionLogger) async -> Verdict {
        await withCheckedContinuation { continuation in
            accept(chat, via: route, logger: logger) { continuation.resume(returning: $0) }
        }
    }

    /// Returns once no chat is under way (shutdown: the listeners are closed and their
    /// connections have ended).
    func waitUntilIdle() async {
        await underWay.waitUntilZero()
    }

    // MARK: Steps

    /// What the archive stores of `chat`: a copy per recipient, and the sender's own.
    private func archiveMessage(_ chat: Chat) -> ArchiveMessage {
        let send = chat.send
        let conversation: (String) -> Conversation = { peer in send.group.map(Conversation.group) ?? .user(peer) }
        var copies = chat.recipients.map { ArchiveMessage.Copy(stream: $0, conversation: conversation(chat.from)) }
        if chat.ownCopy {
            copies.append(ArchiveMessage.Copy(stream: chat.from, origin: chat.device ?? Self.apiOrigin, conversation: conversation(send.to)))
        }
        return ArchiveMessage(
            sender: chat.from, messageID: send.messageID, fingerprint: chat.fingerprint.rawValue, serverTime: chat.serverTime,
            body: PayloadCodec.encode(ChatPayload.archived(send: send, from: chat.from, serverTime: chat.serverTime)), copies: copies)
    }

    /// The origin of the sender's own copy of a chat the server API sent as a user: no device
    /// id can be it (`$` is not allowed in one), so every device of the user gets the carbon.
    static let apiOrigin = "$api"

    /// The archive has (or refused) `chat`: its copies are published with their offsets (a
    /// resend's with the offsets it was stored with), then the answer.
    private func stored(
        _ chat: Chat, _ message: ArchiveMessage, _ result: Result<AppendOutcome, ArchiveError>, epoch: UInt64,
        route: (any ChatRoute)?, logger: ConnectionLogger, done reportDone: (@Sendable ([UInt64]) -> Void)?,
        answer: @escaping @Sendable (Verdict) -> Void
    ) {
        var chat = chat
        let copies: [StoredCopy]
        let isRepeat: Bool
        switch result {
        case .success(.stored(let offsets)):
            copies = zip(message.copies, offsets).map { StoredCopy(stream: $0.0.stream, offset: $0.1, origin: $0.0.origin) }
            isRepeat = false
        case .success(.duplicate(let stored, let first)):
            copies = stored
            chat.serverTime = first
            isRepeat = true
        case .success(.reused):
            return answer(refuseReused(chat, logger: logger))
        case .failure(let error):
            return answer(.storeUnavailable(retryAfter: error.retryAfter ?? 1_000, message: error.message))
        }
        let own = copies.first { $0.stream == chat.from && $0.origin != nil }?.offset
        let received = copies.filter { $0.origin == nil }
        var publishes = received.map { publish(chat, to: $0.stream, offset: $0.offset, epoch: epoch) }
        if chat.carbon, let own { publishes.append(publish(chat, carbonOffset: own, epoch: epoch)) }
        // The sending device has its own copy, and (a chat to itself) the recipient's too.
        let done = [own].compactMap { $0 } + received.filter { $0.stream == chat.from && chat.send.group == nil }.map(\.offset)
        if let reportDone, !done.isEmpty { reportDone(done) }
        let chatForAnswer = chat
        publish(publishes, of: chat.send.messageID, window: chat.window, via: route, logger: logger) { failure in
            if let failure { return answer(.notPublished(failure)) }
            if !isRepeat { self.accepted(chatForAnswer) }
            answer(.accepted(Accepted(serverTime: chatForAnswer.serverTime, ownOffset: own, done: done, isRepeat: isRepeat, copies: received.count)))
        }
    }

    /// What an accepted chat means beyond its answer: its offline push, its count.
    private func accepted(_ chat: Chat) {
        context.push?.chatAccepted(chat.send, from: chat.from, serverTime: chat.serverTime, recipients: chat.recipients)
        if chat.device == nil { context.statistics.apiMessagesIn.add(1, ordering: .relaxed) }
    }

    private func refuseReused(_ chat: Chat, logger: ConnectionLogger) -> Verdict {
        logger.notice(
            "message id reused for another message: refused",
            metadata: ["message-id": "\(chat.send.messageID)", "from": "\(chat.from)", "to": "\(chat.send.group ?? chat.send.to)"])
        return .reused
    }

    /// The copy of `chat` for `recipient`'s inbox.
    private func publish(_ chat: Chat, to recipient: String, offset: UInt64?, epoch: UInt64?) -> OutgoingPublish {
        .chat(
            chat.send, from: chat.from, serverTime: chat.serverTime, topics: context.topics, authenticator: context.authenticator,
            sentByAPI: chat.device == nil, copy: chat.send.isGroup ? .member(recipient) : .recipient,
            stored: offset.map { ($0, epoch ?? 0) })
    }

    /// The carbon of `chat` for the sender's other devices.
    private func publish(_ chat: Chat, carbonOffset: UInt64?, epoch: UInt64?) -> OutgoingPublish {
        .chat(
            chat.send, from: chat.from, serverTime: chat.serverTime, topics: context.topics, authenticator: context.authenticator,
            sentByAPI: chat.device == nil, copy: .carbon, stored: carbonOffset.map { ($0, epoch ?? 0) })
    }

    /// Publishes `publishes` through `route`, and through the ``relay`` what `route` did not
    /// take (or everything, without a route); `done` gets `nil` once the broker has every one,
    /// else why one is not published. For whatever the archive holds and must go out whatever
    /// happens to the device's session: a chat's copies, a deletion's tombstones.
    func publish(
        _ publishes: [OutgoingPublish], of messageID: String, window: Int, via route: (any ChatRoute)?, logger: ConnectionLogger,
        done: @escaping @Sendable (String?) -> Void
    ) {
        guard let route else { return relay(publishes, of: messageID, window: window, logger: logger, done: done) }
        route.publishChat(publishes, window: window) { outcomes in
            guard outcomes.contains(where: { $0 != nil }) else { return done(nil) }
            let failed = zip(publishes, outcomes).compactMap { $0.1 == nil ? nil : $0.0 }
            logger.notice(
                "the device's session did not publish what the archive holds: the gateway's own session publishes it",
                metadata: [
                    "message-id": "\(messageID)", "copies": "\(failed.count)",
                    "error": "\(outcomes.lazy.compactMap { $0 }.first.map { "\($0)" } ?? "-")",
                ])
            self.relay(failed, of: messageID, window: window, logger: logger, done: done)
        }
    }

    /// ``publish(_:of:window:via:logger:done:)``, awaited. Not cancellable: what was started
    /// goes out whatever the caller does. Counts as work under way for shutdown.
    func publish(_ publishes: [OutgoingPublish], of messageID: String, window: Int, via route: (any ChatRoute)?, logger: ConnectionLogger) async -> String? {
        underWay.enter()
        defer { underWay.leave() }
        return await withCheckedContinuation { continuation in
            publish(publishes, of: messageID, window: window, via: route, logger: logger) { continuation.resume(returning: $0) }
        }
    }

    /// Publishes `publishes` through the ``relay``.
    private func relay(
        _ publishes: [OutgoingPublish], of messageID: String, window: Int, logger: ConnectionLogger, done: @escaping @Sendable (String?) -> Void
    ) {
        let stored = context.archive != nil
        relay.publishChat(publishes, window: window) { outcomes in
            guard let failure = outcomes.lazy.compactMap({ $0 }).first else { return done(nil) }
            logger.warning("not published", metadata: ["message-id": "\(messageID)", "error": "\(failure)", "stored": "\(stored)"])
            done("\(failure)")
        }
    }
}
