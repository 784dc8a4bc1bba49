import IMWire
import NIOCore

/// The whole pipeline of a connection the gateway turns away (``ConnectionAdmission``): it
/// writes ERROR RATE_LIMITED with the reason and closes, reading nothing.
final class ConnectionRefusal: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = IMFrame

    private let reason: String

    init(reason: String) {
        self.reason = reason
    }

    func channelActive(context: ChannelHandlerContext) {
        let error = ErrorNotice(code: .rateLimited, message: reason)
        let frame = IMMessage.error(error).frame(sequence: 1, timestamp: unixSeconds(), sessionID: 0)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(frame)).whenComplete { _ in channel.close(promise: nil) }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Nothing a refused connection sends is read.
    }
}
