import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOSSL
import NIOWebSocket

/// The connections of the WebSocket listener, on Hummingbird's server: HTTP/1 with a WebSocket
/// upgrade. An upgrade that ``WebSocketUpgradePolicy`` accepts becomes a device connection whose
/// channel runs NIOWebSocket's frame codec, ``WebSocketDeviceFraming`` and the same TLV handlers
/// as a TCP device (`install`); one it refuses gets its HTTP status and a JSON error; any other
/// request goes to the router (the client library, the development pages).
///
/// This is what hummingbird-websocket's `HTTP1WebSocketUpgradeChannel` does, with one difference:
/// that one hands an upgraded connection to an async handler (a task reading an
/// `NIOAsyncChannel` of frames), while a device is served by channel handlers, as over TCP: no
/// task and no second copy of the device logic per connection, and an idle browser device costs
/// what an idle TCP one does, plus the WebSocket codec.
struct WebSocketDeviceChannel: ServerChildChannel, HTTPChannelHandler {
    enum Upgrade: Sendable {
        /// A device connection: its handlers serve it.
        case device
        /// A plain HTTP request.
        case http(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        /// A refused upgrade, and why.
        case refused(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, status: Int, code: String, message: String)
    }

    struct Value: ServerChildChannelValue {
        let upgrade: EventLoopFuture<Upgrade>
        let channel: any Channel
    }

    let responder: HTTPChannelHandler.Responder
    let policy: WebSocketUpgradePolicy
    let tls: NIOSSLContext?
    /// The largest WebSocket frame a device may send.
    let maxFrameSize: Int
    /// Adds the device's handlers behind the frame codec (on the channel's event loop).
    let install: @Sendable (any Channel) throws -> Void

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            CloseOnExec.mark(channel)
            let options = channel.syncOptions
            try options?.setOption(.socketOption(.tcp_nodelay), value: 1)
            // As for TCP devices (GatewayServer): a small receive buffer that grows for a busy one.
            try options?.setOption(.recvAllocator, value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 256, maximum: 65536))
            let sync = channel.pipeline.syncOperations
            if let tls { try sync.addHandler(NIOSSLServerHandler(context: tls)) }
            let refusal = NIOLoopBoundBox<(status: Int, code: String, message: String)?>(nil, eventLoop: channel.eventLoop)
            let policy = self.policy
            let install = self.install
            let upgrader = NIOTypedWebSocketServerUpgrader<Upgrade>(
                maxFrameSize: maxFrameSize,
                enableAutomaticErrorHandling: false,
                shouldUpgrade: { channel, head in
                    let request = WebSocketUpgradePolicy.Request(
                        target: head.uri, origin: head.headers.first(name: "origin"), host: head.headers.first(name: "host"),
                        protocols: head.headers[canonicalForm: "sec-websocket-protocol"].map(String.init))
                    switch policy.decide(request) {
                    case .accept(let subprotocol):
                        return channel.eventLoop.makeSucceededFuture(HTTPHeaders([("Sec-WebSocket-Protocol", subprotocol)]))
                    case .refuse(let status, let code, let message):
                        logger.notice("WebSocket upgrade refused", metadata: [
                            "peer": "\(channel.remoteAddress?.description ?? "?")", "status": "\(status)", "reason": "\(message)",
                        ])
                        refusal.value = (status, code, message)
                        return channel.eventLoop.makeSucceededFuture(nil)
                    }
                },
                upgradePipelineHandler: { channel, _ in
                    channel.eventLoop.makeCompletedFuture {
                        try install(channel)
                        return Upgrade.device
                    }
                })
            let upgradeConfiguration = NIOTypedHTTPServerUpgradeConfiguration(
                upgraders: [upgrader],
                notUpgradingCompletionHandler: { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let sync = channel.pipeline.syncOperations
                        try sync.addHandler(HTTP1ToHTTPServerCodec(secure: tls != nil))
                        try sync.addHandler(HTTPConnectionStateHandler(idleTimeout: .seconds(30), logger: logger))
                        let http = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                            wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
                        if let refused = refusal.value {
                            return Upgrade.refused(http, status: refused.status, code: refused.code, message: refused.message)
                        }
                        return Upgrade.http(http)
                    }
                })
            var configuration = NIOUpgradableHTTPServerPipelineConfiguration<Upgrade>(upgradeConfiguration: upgradeConfiguration)
            configuration.enablePipelining = false
            configuration.enableErrorHandling = false
            configuration.enableResponseHeaderValidation = false
            let upgrade = try sync.configureUpgradableHTTPServerPipeline(configuration: configuration)
            return Value(upgrade: upgrade, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.upgrade.get() {
            case .device:
                return
            case .http(let http):
                await handleHTTP(asyncChannel: http, logger: logger)
            case .refused(let http, let status, let code, let message):
                try await http.executeThenClose { _, outbound in
                    let body = ByteBuffer(bytes: Response.errorJSON(code, message))
                    let head = HTTPResponse(
                        status: .init(code: status),
                        headerFields: [.contentType: "application/json", .contentLength: "\(body.readableBytes)", .connection: "close"])
                    try await outbound.write(contentsOf: [.head(head), .body(body), .end(nil)])
                }
            }
        } catch {
            logger.debug("WebSocket listener connection ended", metadata: ["error": "\(error)"])
        }
    }
}
