@testable import IMGateway
import Logging
import Mosquitto
import Synchronization

/// A device's MQTT side without a broker, for ``DeviceConnection`` on a testing channel:
/// it records what the connection asks of it (as ``Call``s, in order, on `calls`), accepts
/// chat publishes at once (or refuses them, as told), and lets the test play the broker's
/// part: deliveries and the loss of the connection.
final class FakeDeviceSession: DeviceSession {
    enum Call: Sendable {
        case connect
        case send(acknowledgements: [UInt64], receipts: [OutgoingPublish])
        /// A chat's copies (``ChatRoute/publishChat(_:window:completion:)``).
        case chats([OutgoingPublish])
        case publish(OutgoingPublish)
        case subscribe([String])
        case unsubscribe([String])
        case end(ConnectionStateMachine.CloseReason)
    }

    let user: String
    let device: String
    let receiptNotices: Bool
    let topics: GatewayTopics
    let gatewayID = "gw-test"
    let loginTime = unixMilliseconds()
    let authenticator = MessageAuthenticator(secret: "fake-session-secret")
    /// Everything the connection asked, in order.
    let calls: AsyncStream<Call>
    fileprivate let record: AsyncStream<Call>.Continuation
    private let mailbox = Mutex<ConnectionMailbox?>(nil)
    /// Chat publishes fail with this, when set.
    let chatFailure = Mutex<MosquittoError?>(nil)
    /// While not `nil`, calls of ``end(_:)`` wait here.
    private let endsHeld = Held<CheckedContinuation<Void, Never>>()
    /// While not `nil`, the outcomes of chat publishes wait here (a broker slow to PUBACK).
    private let heldOutcomes = Held<@Sendable () -> Void>()

    /// What the fake broker's CONNACK announces.
    let capabilities: BrokerCapabilities
    /// The fake broker refuses the CONNECT with this, when set.
    let refusal: ReasonCode?

    init(
        user: String, device: String, receiptNotices: Bool, topics: GatewayTopics, capabilities: BrokerCapabilities = BrokerCapabilities(),
        refusal: ReasonCode? = nil
    ) {
        self.capabilities = capabilities
        self.refusal = refusal
        self.user = user
        self.device = device
        self.receiptNotices = receiptNotices
        self.topics = topics
        (self.calls, self.record) = AsyncStream.makeStream()
    }

    func attach(to mailbox: ConnectionMailbox) async {
        self.mailbox.withLock { $0 = mailbox }
    }

    func connect(unless deviceGone: @escaping @Sendable () -> Bool) async throws -> MosquittoClient.ConnectResult {
        if deviceGone() { throw DeviceConnection.LoginFailure.deviceGone }
        record.yield(.connect)
        if let refusal = refusal { throw MosquittoError.connectionRefused(refusal) }
        return MosquittoClient.ConnectResult(sessionPresent: false, capabilities: capabilities)
    }

    func send(_ batch: UplinkBatch, logger: ConnectionLogger) {
        record.yield(.send(acknowledgements: batch.acknowledgements, receipts: batch.receipts.map(\.publish)))
        // Answers to presence probes, as the publishes they are.
        for answer in batch.presenceAnswers { record.yield(.publish(answer)) }
    }

    func publishChat(_ publishes: [OutgoingPublish], window: Int, completion: @escaping @Sendable ([(any Error)?]) -> Void) {
        record.yield(.chats(publishes))
        let failure = chatFailure.withLock { $0 }
        let outcome: @Sendable () -> Void = { completion(publishes.map { _ in failure }) }
        if !heldOutcomes.keep(outcome) { outcome() }
    }

    /// Chat publishes' outcomes wait from now on, until ``releaseOutcomes()``.
    func holdOutcomes() {
        heldOutcomes.start()
    }

    /// Posts the outcomes held, in order, and stops holding them.
    func releaseOutcomes() {
        for outcome in heldOutcomes.release() { outcome() }
    }

    func publish(_ publish: OutgoingPublish) async throws {
        record.yield(.publish(publish))
    }

    func enqueue(_ publish: OutgoingPublish) async throws {
        record.yield(.publish(publish))
    }

    func publishAll(_ publishes: [OutgoingPublish], window: Int) async throws {
        for publish in publishes { record.yield(.publish(publish)) }
    }

    func subscribe(_ subscriptions: [MosquittoClient.Subscription]) async throws -> [MosquittoClient.SubscriptionResult] {
        record.yield(.subscribe(subscriptions.map(\.filter)))
        return subscriptions.map { .granted($0.qos) }
    }

    func unsubscribe(_ filters: [String]) async throws {
        record.yield(.unsubscribe(filters))
    }

    func end(_ reason: ConnectionStateMachine.CloseReason) async {
        record.yield(.end(reason))
        await withCheckedContinuation { continuation in
            if !endsHeld.keep(continuation) { continuation.resume() }
        }
    }

    /// From now on ``end(_:)`` returns only after ``releaseEnds()`` (a broker slow to see the
    /// session go).
    func holdEnds() {
        endsHeld.start()
    }

    /// Lets the held ends return, and those to come.
    func releaseEnds() {
        for continuation in endsHeld.release() { continuation.resume() }
    }

    // The broker's part.

    /// A message on one of the session's subscriptions.
    func deliver(_ message: MosquittoMessage) {
        let mailbox = self.mailbox.withLock { $0 }
        mailbox?.post(.message(message, topics.classify(message.topic)))
    }

    /// The MQTT connection ends.
    func lose(_ reason: LossReason) {
        let mailbox = self.mailbox.withLock { $0 }
        mailbox?.post(.lost(reason, session: ObjectIdentifier(self)))
    }
}

extension FakeDeviceSession {
    /// The next call that `match` accepts (the others are skipped); `nil` if none comes
    /// within `seconds` (real time: the stream of calls is then finished).
    func next<T>(within seconds: Int = 10, _ match: (Call) -> T?) async -> T? {
        let record = self.record
        let watchdog = Task {
            try await Task.sleep(for: .seconds(seconds))
            record.finish()
        }
        defer { watchdog.cancel() }
        for await call in calls {
            if let found = match(call) { return found }
        }
        return nil
    }
}

/// Items kept back while holding (from ``start()`` until ``release()``), for a fake that
/// delays what the real part would do at once.
final class Held<Item: Sendable>: Sendable {
    private let items = Mutex<[Item]?>(nil)

    /// Keeps items from now on.
    func start() {
        items.withLock { $0 = $0 ?? [] }
    }

    /// Keeps `item` if holding; whether it did (if not, the caller goes on with it).
    func keep(_ item: Item) -> Bool {
        items.withLock { items in
            items?.append(item)
            return items != nil
        }
    }

    /// Stops holding; returns what was kept, in order.
    func release() -> [Item] {
        items.withLock { items in
            defer { items = nil }
            return items ?? []
        }
    }
}

/// The gateway's own session for ``ChatAcceptance`` in tests without a broker: it records what
/// it is given and refuses it (``MosquittoError/notConnected``) unless told to take it.
final class FakeRelay: ChatRoute {
    let taken = Mutex<[OutgoingPublish]>([])
    /// Whether it takes what it is given.
    let takes = Mutex(false)

    func publishChat(_ publishes: [OutgoingPublish], window: Int, completion: @escaping @Sendable ([(any Error)?]) -> Void) {
        let takes = self.takes.withLock { $0 }
        if takes { taken.withLock { $0 += publishes } }
        completion(publishes.map { _ in takes ? nil : MosquittoError.notConnected })
    }
}
