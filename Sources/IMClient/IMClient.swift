#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import IMWire
import NIOCore
import NIOPosix
import Synchronization

/// A logged-in connection to an IMGateway: chat, receipts and presence over the TLV protocol
/// (docs/PROTOCOL.md).
///
/// ```swift
/// let client = try await IMClient.connect(.init(token: token, deviceID: "phone"))
/// let receipt = try await client.send(to: "bob", text: "hi")   // returns once the gateway ACKed it
/// for await event in client.events {
///     if case .message(let message) = event { print("\(message.from): \(message.text ?? "")") }
/// }
/// ```
///
/// The client sends a HEARTBEAT whenever it has sent nothing for the heartbeat interval, and
/// treats the connection as dead when nothing at all arrived for two intervals plus a
/// margin. Deliveries and receipt notices are ACKed as soon as they are handed to
/// ``events`` (the gateway holds this device's other traffic until they are), and a
/// redelivered message is ACKed without being surfaced again.
///
/// This version does not reconnect: when the connection ends, ``events`` yields
/// ``Event/disconnected`` and finishes, requests in flight throw
/// ``IMClientError/disconnected``, and the application connects a new client (resending
/// unacknowledged chat messages with the same ids).
public actor IMClient {
    /// What the gateway sends this device, in arrival order, until the connection ends.
    /// Iterate it once (a second iterator would take a share of the events). Events wait in
    /// an unbounded buffer until taken.
    public nonisolated let events: AsyncStream<Event>
    /// The configuration this client connected with.
    public nonisolated let configuration: Configuration

    /// The session LOGIN_OK described.
    public nonisolated var session: Session {
        guard let session = sessionBox.withLock({ $0 }) else { preconditionFailure("IMClient is returned logged in") }
        return session
    }

    /// The session id this client puts in its frames (any value is valid; one per connection).
    static let sessionID: UInt16 = 1

    let channel: NIOAsyncChannel<IMFrame, IMFrame>
    let eventSink: AsyncStream<Event>.Continuation
    private let sessionBox = Mutex<Session?>(nil)
    let clock = ContinuousClock()

    var outbound: NIOAsyncChannelOutboundWriter<IMFrame>?
    var router: InboundRouter
    var sequence = SequenceCounter()
    var pending = PendingAcks<CheckedContinuation<Result<Ack, IMClientError>, Never>>()
    private var loginWaiter: CheckedContinuation<Result<Session, IMClientError>, Never>?
    private var connectionTask: Task<Void, Never>?
    var keepaliveTask: Task<Void, Never>?
    var isClosed = false
    var endedByApplication = false
    var lastSent: ContinuousClock.Instant
    var lastReceived: ContinuousClock.Instant

    // MARK: Connecting

    /// Opens a TCP connection, logs in, and returns the logged-in client.
    ///
    /// - Throws: ``IMClientError/cannotConnect(host:port:reason:)``,
    ///   ``IMClientError/loginRefused(_:_:)`` (from the gateway's ERROR),
    ///   ``IMClientError/timeout`` (no LOGIN_OK within the ACK timeout), or
    ///   ``IMClientError/disconnected`` (the gateway closed the connection first).
    public static func connect(_ configuration: Configuration) async throws(IMClientError) -> IMClient {
        let channel: NIOAsyncChannel<IMFrame, IMFrame>
        do {
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .connectTimeout(TimeAmount(configuration.connectTimeout))
                .connect(host: configuration.host, port: configuration.port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandlers([
                            ByteToMessageHandler(IMFrameDecoder()),
                            MessageToByteHandler(IMFrameEncoder()),
                        ])
                        return try NIOAsyncChannel<IMFrame, IMFrame>(wrappingChannelSynchronously: channel)
                    }
                }
        } catch {
            throw .cannotConnect(host: configuration.host, port: configuration.port, reason: Self.explain(error))
        }
        return try await connect(configuration, over: channel)
    }

    /// Logs in over an open channel of frames (the codec already in its pipeline, or none
    /// for an embedded test channel).
    static func connect(_ configuration: Configuration, over channel: NIOAsyncChannel<IMFrame, IMFrame>) async throws(IMClientError) -> IMClient {
        let client = IMClient(configuration: configuration, channel: channel)
        try await client.start()
        return client
    }

    private init(configuration: Configuration, channel: NIOAsyncChannel<IMFrame, IMFrame>) {
        self.configuration = configuration
        self.channel = channel
        (self.events, self.eventSink) = AsyncStream.makeStream(of: Event.self)
        self.router = InboundRouter(dedupWindow: configuration.dedupWindow)
        self.lastSent = clock.now
        self.lastReceived = clock.now
    }

    /// Starts the connection task (which sends LOGIN) and waits for the answer.
    private func start() async throws(IMClientError) {
        let timeout = configuration.ackTimeout
        let result = await withCheckedContinuation { (waiter: CheckedContinuation<Result<Session, IMClientError>, Never>) in
            self.loginWaiter = waiter
            self.connectionTask = Task { await self.run() }
            Task { [weak self] in
                try? await Task.sleep(for: timeout)
                await self?.finishLogin(.failure(.timeout))
            }
        }
        switch result {
        case .success(let session):
            sessionBox.withLock { $0 = session }
            keepaliveTask = Task { await self.keepalive(interval: session.heartbeatInterval) }
        case .failure(let error):
            await close()
            throw error
        }
    }

    func finishLogin(_ result: Result<Session, IMClientError>) {
        guard let waiter = loginWaiter else { return }
        loginWaiter = nil
        waiter.resume(returning: result)
    }

    func session(from ok: LoginOK) -> Session {
        let announced = ok.heartbeatInterval.flatMap { $0 > 0 ? Duration.seconds(Int($0)) : nil }
        return Session(
            userID: ok.userID, deviceID: ok.deviceID ?? configuration.deviceID, serverTime: ok.serverTime,
            heartbeatInterval: configuration.heartbeatInterval ?? announced ?? Configuration.defaultHeartbeatInterval)
    }

    // MARK: Requests

    /// Sends a text message to `user` and returns once the gateway has accepted it (its
    /// broker has it).
    ///
    /// - Parameter messageID: Unique per sender; keep it when sending the same message again
    ///   (after ``IMClientError/timeout`` or ``IMClientError/disconnected``), so the recipient
    ///   gets it once. Default: a new UUID.
    /// - Throws: ``IMClientError/refused(_:_:)`` (e.g. INVALID_USER_ID, RATE_LIMITED,
    ///   BROKER_UNAVAILABLE), ``IMClientError/timeout``, ``IMClientError/disconnected``.
    @discardableResult
    public func send(to user: String, text: String, messageID: String = IMClient.makeMessageID()) async throws(IMClientError) -> SendReceipt {
        try await send(to: user, content: .text(text), messageID: messageID)
    }

    /// Sends a message with any content (text, or bytes tagged image, file, ...) to `user`;
    /// see ``send(to:text:messageID:)``.
    @discardableResult
    public func send(to user: String, content: IMContent, messageID: String = IMClient.makeMessageID()) async throws(IMClientError) -> SendReceipt {
        let ack = try await request(.chat(ChatSend(to: user, messageID: messageID, content: content)))
        return SendReceipt(messageID: ack.messageID ?? messageID, serverTime: ack.serverTime)
    }

    /// Tells `sender` that this user read their message `messageID` (a RECEIPT).
    public func sendReadReceipt(to sender: String, messageID: String) async throws(IMClientError) {
        _ = try await request(.readReceipt(ReadReceipt(to: sender, messageID: messageID)))
    }

    /// Watches the presence of `users`: ``events`` yields the current state of each of their
    /// devices, then every change.
    /// - Throws: ``IMClientError/refused(_:_:)`` (FORBIDDEN, INVALID_USER_ID), ``IMClientError/timeout``,
    ///   ``IMClientError/disconnected``.
    public func watchPresence(_ users: [String]) async throws(IMClientError) {
        _ = try await request(.presenceWatch(PresenceWatch(users: users)))
    }

    /// Stops watching the presence of `users`.
    public func unwatchPresence(_ users: [String]) async throws(IMClientError) {
        _ = try await request(.presenceUnwatch(PresenceUnwatch(users: users)))
    }

    /// Ends this device's session (its presence goes offline, and messages not yet
    /// delivered to it are dropped by the gateway), then closes. ``events`` finishes without
    /// ``Event/disconnected``. To keep the session, use ``close()``.
    public func logout() async {
        endedByApplication = true
        _ = try? await request(.logout(Logout()))
        await close()
    }

    /// Closes the connection without logging out: the gateway keeps this device's session
    /// and queues its messages for the next login. ``events`` finishes without
    /// ``Event/disconnected``; requests in flight throw ``IMClientError/disconnected``.
    public func close() async {
        endedByApplication = true
        channel.channel.close(promise: nil)
        await connectionTask?.value
    }

    /// A new message id: a lowercase UUID.
    public static func makeMessageID() -> String {
        UUID().uuidString.lowercased()
    }

    /// Sends `message` with a new sequence number and waits for its ACK (positive: returned;
    /// negative: thrown as ``IMClientError/refused(_:_:)``).
    private func request(_ message: IMMessage) async throws(IMClientError) -> Ack {
        guard router.isLoggedIn, !isClosed else { throw .disconnected }
        let sequence = self.sequence.next(skipping: pending.contains)
        let deadline = clock.now + configuration.ackTimeout
        pending.insert(sequence, deadline: deadline)
        Task { [weak self] in
            try? await Task.sleep(until: deadline, clock: .continuous)
            await self?.expireOverdue()
        }
        do {
            try await write(message.frame(sequence: sequence, timestamp: Self.unixSeconds(), sessionID: Self.sessionID))
        } catch {
            _ = pending.settle(sequence, with: .failure(.disconnected))
        }
        let outcome = await withCheckedContinuation { waiter in
            if let outcome = pending.attach(waiter, to: sequence) { waiter.resume(returning: outcome) }
        }
        let ack = try outcome.get()
        if let code = ack.error { throw .refused(code, ack.errorMessage) }
        return ack
    }

    private func expireOverdue() {
        for waiter in pending.expire(now: clock.now) { waiter.resume(returning: .failure(.timeout)) }
    }

    func write(_ frame: IMFrame) async throws {
        guard let outbound, !isClosed else { throw IMClientError.disconnected }
        lastSent = clock.now
        try await outbound.write(frame)
    }
}
