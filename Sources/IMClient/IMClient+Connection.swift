import IMWire
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One transport to the gateway: dialled, read until it ends, written to by the client.
/// Each reconnect makes a new one; its `generation` tells the client which frames are stale.
final class Connection: Sendable {
    let generation: Int
    private struct State {
        var channel: (any Channel)?
        var closed = false
    }
    private let state = Mutex(State())

    init(generation: Int) {
        self.generation = generation
    }

    /// Dials, sends LOGIN (through the client), feeds every frame to the client, and tells
    /// it when the transport ended and why.
    func start(client: IMClient, dialer: @escaping IMClient.Dialer, configuration: IMClient.Configuration) {
        let generation = self.generation
        Task {
            let channel: NIOAsyncChannel<IMFrame, IMFrame>
            do {
                channel = try await dialer(configuration)
            } catch {
                let reason = Self.explain(error)
                await client.transportEnded(generation: generation, cause: .cannotConnect(host: configuration.host, port: configuration.port, reason: reason))
                return
            }
            let adopted = state.withLock { state -> Bool in
                guard !state.closed else { return false }
                state.channel = channel.channel
                return true
            }
            guard adopted else {
                try? await channel.channel.close()
                await client.transportEnded(generation: generation, cause: .disconnected)
                return
            }
            let cause: IMClientError
            do {
                cause = try await channel.executeThenClose { inbound, _ in
                    await client.transportOpened(generation: generation)
                    do {
                        for try await frame in inbound { await client.received(frame, generation: generation) }
                        return IMClientError.disconnected
                    } catch let error as IMWireError where error.isFatal {
                        // The stream is no longer framed: say why (if we still can), then close.
                        let frame = error.errorFrame(sequence: 0, timestamp: IMClient.unixSeconds(), sessionID: IMClient.sessionID)
                        try? await channel.channel.writeAndFlush(frame)
                        return IMClientError.protocolViolation("\(error)")
                    } catch let error as NIOSSLError {
                        return .tlsFailed(host: configuration.host, port: configuration.port, reason: "\(error)")
                    } catch let error as BoringSSLError {
                        return .tlsFailed(host: configuration.host, port: configuration.port, reason: "\(error)")
                    }
                }
            } catch {
                cause = .disconnected
            }
            await client.transportEnded(generation: generation, cause: cause)
        }
    }

    /// Writes and flushes `frame` (dropped if the transport is not open); frames go out in
    /// the order of the calls.
    func write(_ frame: IMFrame) {
        guard let channel = state.withLock({ $0.channel }) else { return }
        channel.writeAndFlush(frame, promise: nil)
    }

    /// Closes the transport, or makes sure it is closed as soon as the dial completes.
    func close() {
        let channel = state.withLock { state -> (any Channel)? in
            state.closed = true
            return state.channel
        }
        channel?.close(promise: nil)
    }

    /// Opens a TCP (and, if configured, TLS) connection with the frame codec; over WebSocket
    /// with ``IMClient/Configuration/webSocketPath``.
    static func dial(_ configuration: IMClient.Configuration) async throws -> NIOAsyncChannel<IMFrame, IMFrame> {
        let sslContext = try configuration.tls.map { try NIOSSLContext(configuration: $0) }
        let serverName = configuration.tlsServerName ?? configuration.host
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connectTimeout(TimeAmount(configuration.connectTimeout))
        @Sendable func framed(_ channel: any Channel) throws -> NIOAsyncChannel<IMFrame, IMFrame> {
            try channel.pipeline.syncOperations.addHandlers([
                ByteToMessageHandler(IMFrameDecoder()),
                MessageToByteHandler(IMFrameEncoder()),
            ])
            return try NIOAsyncChannel<IMFrame, IMFrame>(wrappingChannelSynchronously: channel)
        }
        @Sendable func secure(_ channel: any Channel) throws {
            guard let sslContext else { return }
            let handler = try NIOSSLClientHandler(context: sslContext, serverHostname: Self.isAddress(serverName) ? nil : serverName)
            try channel.pipeline.syncOperations.addHandler(handler)
        }
        guard let path = configuration.webSocketPath else {
            return try await bootstrap.connect(host: configuration.host, port: configuration.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try secure(channel)
                    return try framed(channel)
                }
            }
        }
        let upgraded = try await bootstrap.connect(host: configuration.host, port: configuration.port) { channel in
            channel.eventLoop.makeCompletedFuture {
                try secure(channel)
                return try WebSocketTransport.configure(channel, host: configuration.host, port: configuration.port, path: path, upgraded: framed)
            }
        }
        return try await upgraded.get()
    }

    /// Whether `host` is an IP address (SNI takes names only).
    static func isAddress(_ host: String) -> Bool {
        (try? SocketAddress(ipAddress: host, port: 0)) != nil
    }

    /// A short reason for a failed connect: the system's text where there is one.
    static func explain(_ error: any Error) -> String {
        switch error {
        case let error as NIOConnectionError:
            if let first = error.connectionErrors.first { return explain(first.error) }
            if let dns = error.dnsAError ?? error.dnsAAAAError { return "cannot resolve \(error.host): \(dns)" }
            return "no address for \(error.host)"
        case let error as IOError:
            return String(cString: strerror(error.errnoCode))
        case ChannelError.connectTimeout(let amount):
            return "no answer within \(Duration(amount))"
        default:
            return "\(error)"
        }
    }
}

// The client's side of a connection: LOGIN, then every frame through the InboundRouter.
extension IMClient {
    /// The transport of `generation` is open: log in, with a new token from the provider
    /// first if the one in hand expired or is due for a refresh.
    func transportOpened(generation: Int) {
        guard generation == self.generation, connection != nil, machine.state == .connecting else { return }
        guard let provider = configuration.tokenProvider, tokenExpired || tokenSchedule.isRefreshDue(now: clock.now) else {
            sendLogin(generation: generation)
            return
        }
        Task { [weak self] in
            let fetched: Result<String, any Error>
            do { fetched = .success(try await provider()) } catch { fetched = .failure(error) }
            await self?.logIn(with: fetched, generation: generation)
        }
    }

    /// The provider answered for the LOGIN of `generation` (which the connect timeout
    /// still bounds): log in with its token, or with the old one unless that is known to be
    /// expired.
    private func logIn(with fetched: Result<String, any Error>, generation: Int) {
        guard generation == self.generation, connection != nil, machine.state == .connecting else { return }
        switch fetched {
        case .success(let token):
            newestToken = token
            tokenExpired = false
        case .failure(let error) where tokenExpired:
            // A LOGIN with the expired token would only be refused: try again later.
            connection?.close()
            lost(.loginRefused(.tokenExpired, "the token expired and the token provider failed: \(error)"))
            return
        case .failure:
            break
        }
        sendLogin(generation: generation)
    }

    /// Writes LOGIN with the newest token.
    private func sendLogin(generation: Int) {
        guard generation == self.generation, let connection, machine.state == .connecting else { return }
        // RECEIPT_NOTICES only to turn them off: absent means on.
        let login = LoginRequest(token: newestToken, deviceID: configuration.deviceID,
                                 receiptNotices: configuration.receiptNotices ? nil : false,
                                 carbons: configuration.carbons ? nil : false,
                                 position: router.cursor.position)
        write(IMMessage.login(login).frame(sequence: nextSequence(), timestamp: Self.unixSeconds(), sessionID: Self.sessionID), on: connection)
    }

    /// A frame from the gateway on the transport of `generation`.
    func received(_ frame: IMFrame, generation: Int) {
        guard generation == self.generation, let connection else { return }
        heartbeat?.frameReceived(at: clock.now)
        for action in router.react(to: frame, timestamp: Self.unixSeconds()) {
            switch action {
            case .loggedIn(let ok):
                loggedIn(ok, generation: generation)
            case .loginRefused(let code, let message):
                connection.close()
                lost(.loginRefused(code, message))
            case .settle(let ack):
                settle(ack)
            case .emit(.kicked(let code, let message)):
                // The gateway closes after a KICK; whether to come back depends on the code.
                eventSink.yield(.kicked(code, message))
                connection.close()
                lost(.kicked(code, message))
            case .emit(let event):
                eventSink.yield(event)
            case .reply(let reply):
                write(reply, on: connection)
            case .answer(let sequence, let message):
                // Kept only for a request still waiting (not one that timed out meanwhile).
                guard outbox.isInFlight(sequence: sequence) else { continue }
                answers[sequence] = message
                settle(Ack(sequence: sequence))
            }
        }
    }
}
