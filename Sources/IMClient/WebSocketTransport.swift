import IMWire
import NIOCore
import NIOHTTP1
import NIOWebSocket

/// The TLV stream over a WebSocket (docs/PROTOCOL.md 1.1), for a gateway's `listen.websocket`
/// listener: an HTTP upgrade on its path with the subprotocol `imgw.tlv.v1`, then the frames in
/// masked binary messages. ``IMClient`` uses it when ``IMClient/Configuration/webSocketPath``
/// is set; it is public for other NIO clients of the gateway (benchmarks, tests).
public enum WebSocketTransport {
    /// The subprotocol the gateway requires.
    public static let subprotocol = IMWire.webSocketSubprotocol

    /// The upgrade was refused: the gateway answered the HTTP request with another status
    /// than 101 (a wrong path, origin or subprotocol, or no WebSocket listener there).
    public struct UpgradeRefused: Error, CustomStringConvertible {
        public var description: String { "the gateway refused the WebSocket upgrade (is the path its listen.websocket.path?)" }
    }

    /// Sets up a connecting `channel` (call it in the bootstrap's initializer, after any TLS
    /// handler) to upgrade to a WebSocket on `path` of `host:port`. Once upgraded, the channel
    /// carries the TLV byte stream (``WebSocketTLVStream`` behind NIOWebSocket's frame codec)
    /// and `upgraded` adds what reads and writes it (the frame decoder and encoder, a handler);
    /// the future then completes with what `upgraded` returned, or fails with
    /// ``UpgradeRefused``.
    /// `closed`, if given, is told the code of the gateway's close frame (nil: it sent none).
    public static func configure<Result: Sendable>(
        _ channel: any Channel, host: String, port: Int, path: String, maxFrameSize: Int = (1 << 20) + 28,
        closed: (@Sendable (WebSocketErrorCode?) -> Void)? = nil,
        upgraded: @escaping @Sendable (any Channel) throws -> Result
    ) throws -> EventLoopFuture<Result> {
        let upgrader = NIOTypedWebSocketClientUpgrader<Result>(
            maxFrameSize: maxFrameSize, enableAutomaticErrorHandling: true,
            upgradePipelineHandler: { channel, _ in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(WebSocketTLVStream(closed: closed))
                    return try upgraded(channel)
                }
            })
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: port == 80 || port == 443 ? host : "\(host):\(port)")
        headers.add(name: "Sec-WebSocket-Protocol", value: subprotocol)
        headers.add(name: "Content-Length", value: "0")
        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers)
        let configuration = NIOTypedHTTPClientUpgradeConfiguration<Result>(
            upgradeRequestHead: head, upgraders: [upgrader],
            notUpgradingCompletionHandler: { channel in
                channel.close(promise: nil)
                return channel.eventLoop.makeFailedFuture(UpgradeRefused())
            })
        return try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(
            configuration: .init(upgradeConfiguration: configuration))
    }
}

/// A client's side of the TLV stream in WebSocket messages: binary (and continuation) payloads
/// go up as bytes, written bytes go out as masked binary messages, pings are answered, and the
/// gateway's close frame is echoed and ends the connection.
public final class WebSocketTLVStream: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = WebSocketFrame
    public typealias InboundOut = ByteBuffer
    public typealias OutboundIn = ByteBuffer
    public typealias OutboundOut = WebSocketFrame

    /// The close frame the gateway sent, if it did: its code.
    public private(set) var closeCode: WebSocketErrorCode?
    private let closed: (@Sendable (WebSocketErrorCode?) -> Void)?

    /// `closed` is told the code of the gateway's close frame when the connection closes.
    public init(closed: (@Sendable (WebSocketErrorCode?) -> Void)? = nil) {
        self.closed = closed
    }

    public func channelInactive(context: ChannelHandlerContext) {
        closed?(closeCode)
        context.fireChannelInactive()
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .binary, .continuation:
            context.fireChannelRead(wrapInboundOut(frame.unmaskedData))
        case .ping:
            let pong = WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData)
            context.writeAndFlush(wrapOutboundOut(pong), promise: nil)
        case .connectionClose:
            var payload = frame.unmaskedData
            closeCode = payload.readWebSocketErrorCode()
            // Echo it, then close: the server closes its side too.
            var echo = context.channel.allocator.buffer(capacity: 2)
            echo.write(webSocketErrorCode: closeCode ?? .normalClosure)
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: echo)))
                .whenComplete { _ in loopBound.value.close(promise: nil) }
        default:
            break
        }
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let bytes = unwrapOutboundIn(data)
        context.write(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .binary, maskKey: .random(), data: bytes)), promise: promise)
    }
}

@available(*, unavailable)
extension WebSocketTLVStream: Sendable {}
