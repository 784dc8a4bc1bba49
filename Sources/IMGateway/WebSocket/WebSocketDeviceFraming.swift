import NIOCore
import NIOWebSocket

/// A browser device's WebSocket framing, between NIOWebSocket's frame codec and the device's
/// TLV handlers (the same ``DeviceConnection`` as over TCP): binary payloads go up as the TLV
/// byte stream, the device's encoded frames go down as binary messages, pings are answered, and
/// every violation of RFC 6455 closes with its code (``WebSocketFraming``). Closing the channel
/// (the session ended, a KICK, shutdown) sends a close frame first.
final class WebSocketDeviceFraming: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = WebSocketFrame

    private var framing = WebSocketFraming()
    private let logger: ConnectionLogger

    init(logger: ConnectionLogger) {
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch framing.received(frame, now: context.eventLoop.now) {
        case .deliver:
            context.fireChannelRead(wrapInboundOut(frame.unmaskedData))
        case .pong:
            let pong = WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)
            context.writeAndFlush(wrapOutboundOut(pong), promise: nil)
        case .ignore:
            break
        case .close(let code, let reason):
            if frame.opcode != .connectionClose {
                logger.notice("closing the WebSocket", metadata: ["code": "\(UInt16(webSocketErrorCode: code))", "reason": "\(reason)"])
            }
            sendClose(context: context, code: code, reason: reason)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            framing.goingAway = true
        } else if case ChannelEvent.inputClosed = event {
            // The device half-closed without a close frame: nothing more can come.
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let error = error as? NIOWebSocketError else {
            context.fireErrorCaught(error)
            return
        }
        if case .close(let code, let reason) = framing.decodingFailed(error) {
            logger.notice("closing the WebSocket", metadata: ["code": "\(UInt16(webSocketErrorCode: code))", "reason": "\(reason)"])
            sendClose(context: context, code: code, reason: reason)
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let bytes = unwrapOutboundIn(data)
        guard !framing.closing else {
            promise?.fail(ChannelError.outputClosed)
            return
        }
        // One binary message per write: the frames of one turn of the device's handler. (An
        // empty write, made to learn when what was written before has left, is an empty message,
        // which adds nothing to the stream.)
        context.write(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .binary, data: bytes)), promise: promise)
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        guard mode == .all, case .close(let code, let reason) = framing.closeRequested() else {
            context.close(mode: mode, promise: promise)
            return
        }
        sendClose(context: context, code: code, reason: reason, promise: promise)
    }

    /// Sends a close frame, then closes the connection once it has left (the server closes the
    /// TCP connection first, RFC 6455 7.1.1).
    private func sendClose(context: ChannelHandlerContext, code: WebSocketErrorCode, reason: String, promise: EventLoopPromise<Void>? = nil) {
        var payload = context.channel.allocator.buffer(capacity: 2 + reason.utf8.count)
        payload.write(webSocketErrorCode: code)
        // A close frame is a control frame: 125 bytes at most.
        payload.writeString(String(decoding: reason.utf8.prefix(123), as: UTF8.self))
        let frame = WebSocketFrame(fin: true, opcode: .connectionClose, data: payload)
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(frame)).whenComplete { _ in
            loopBound.value.close(mode: .all, promise: promise)
        }
    }
}
