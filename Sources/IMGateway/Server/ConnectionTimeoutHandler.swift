import IMWire
import NIOCore

/// Closes a TLV connection that does not log in within the login timeout, or that sends
/// nothing (no frame, not even a heartbeat) for the idle timeout, after telling the
/// client why with an ERROR frame. The async side learns the reason from the error this
/// handler fires (`GatewayError.timedOut`).
final class ConnectionTimeoutHandler: ChannelDuplexHandler {
    typealias InboundIn = IMFrame
    typealias InboundOut = IMFrame
    typealias OutboundIn = IMFrame
    typealias OutboundOut = IMFrame

    /// Sent down the pipeline by the connection once the login succeeded.
    struct LoggedIn: Sendable {}

    private let loginTimeout: TimeAmount
    private let idleTimeout: TimeAmount
    private let sequence: OutboundSequence
    private var loggedIn = false
    private var lastRead: NIODeadline = .now()
    private var timer: Scheduled<Void>?

    init(loginTimeout: TimeAmount, idleTimeout: TimeAmount, sequence: OutboundSequence) {
        self.loginTimeout = loginTimeout
        self.idleTimeout = idleTimeout
        self.sequence = sequence
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { arm(context: context, after: loginTimeout) }
    }

    func channelActive(context: ChannelHandlerContext) {
        arm(context: context, after: loginTimeout)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        lastRead = .now()
        context.fireChannelRead(data)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is LoggedIn {
            loggedIn = true
            lastRead = .now()
            arm(context: context, after: idleTimeout)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func arm(context: ChannelHandlerContext, after delay: TimeAmount) {
        timer?.cancel()
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: delay) {
            let (handler, context) = loopBound.value
            handler.check(context: context)
        }
    }

    private func check(context: ChannelHandlerContext) {
        guard context.channel.isActive else { return }
        if !loggedIn {
            expire(context: context, code: .loginTimeout, message: "no login within \(loginTimeout.nanoseconds / 1_000_000_000) s")
            return
        }
        let idleFor = NIODeadline.now() - lastRead
        if idleFor >= idleTimeout {
            expire(context: context, code: .idleTimeout, message: "nothing received for \(idleTimeout.nanoseconds / 1_000_000_000) s")
        } else {
            arm(context: context, after: idleTimeout - idleFor)
        }
    }

    private func expire(context: ChannelHandlerContext, code: IMErrorCode, message: String) {
        // PROTOCOL.md 6.1/6.2: ERROR LOGIN_TIMEOUT before login, KICK IDLE_TIMEOUT after.
        let notice: IMMessage = loggedIn ? .kick(Kick(reason: code, message: message)) : .error(ErrorNotice(code: code, message: message))
        let frame = notice.frame(sequence: sequence.next(), timestamp: unixSeconds(), sessionID: 0)
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        context.fireErrorCaught(GatewayError.timedOut(code))
        context.close(promise: nil)
    }
}
