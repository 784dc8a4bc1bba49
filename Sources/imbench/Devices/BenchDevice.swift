import IMClient
import IMWire
import NIOCore
import NIOPosix

/// A connected, logged-in benchmark device: one TCP connection to the gateway with the TLV
/// codec and a ``BenchDeviceHandler`` driving a ``DeviceBehaviour``.
struct BenchDevice: Sendable {
    /// The connection.
    let channel: any Channel
    /// What the gateway answered to LOGIN.
    let loginOK: LoginOK

    /// Connects, logs in, and returns after LOGIN_OK.
    /// - Parameters:
    ///   - behaviour: Makes the device's behaviour (called on `loop`, once).
    ///   - timeout: For connect and login together.
    /// - Throws: ``BenchError`` with the gateway's refusal, a timeout, or NIO's connect error.
    static func connect(
        to gateway: HostPort, webSocketPath: String? = nil, on loop: any EventLoop, token: String, deviceID: String,
        timeout: TimeAmount = .seconds(30), receiptNotices: Bool = true, behaviour: @escaping @Sendable () -> any DeviceBehaviour
    ) async throws -> BenchDevice {
        let login = loop.makePromise(of: LoginOK.self)
        let timer = loop.scheduleTask(in: timeout) {
            login.fail(BenchError("no LOGIN_OK within \(timeout.nanoseconds / 1_000_000_000) s"))
        }
        let channel: any Channel
        do {
            channel = try await ClientBootstrap(group: loop)
                .connectTimeout(timeout)
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let framed: @Sendable (any Channel) throws -> Void = { channel in
                            try channel.pipeline.syncOperations.addHandlers([
                                ByteToMessageHandler(IMFrameDecoder()),
                                MessageToByteHandler(IMFrameEncoder()),
                                BenchDeviceHandler(
                                    token: token, deviceID: deviceID, receiptNotices: receiptNotices, login: login, behaviour: behaviour()),
                            ])
                        }
                        guard let webSocketPath else { return try framed(channel) }
                        // Over WebSocket: the same handlers once upgraded (the login promise
                        // fails if the upgrade does).
                        try WebSocketTransport.configure(channel, host: gateway.host, port: gateway.port, path: webSocketPath, upgraded: framed)
                            .whenFailure { login.fail($0) }
                    }
                }
                .connect(host: gateway.host, port: gateway.port)
                .get()
        } catch {
            timer.cancel()
            login.fail(error)
            throw error
        }
        do {
            let ok = try await login.futureResult.get()
            timer.cancel()
            return BenchDevice(channel: channel, loginOK: ok)
        } catch {
            timer.cancel()
            channel.close(promise: nil)
            throw error
        }
    }

    /// Sends `event` to the device's behaviour (on its event loop).
    func send(_ event: BenchEvent) {
        channel.pipeline.fireUserInboundEventTriggered(event)
    }

    /// Closes the connection (the gateway sees a drop: presence goes offline by will).
    func close() async {
        try? await channel.close()
    }
}
