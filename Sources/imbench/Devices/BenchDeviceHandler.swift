import IMWire
import NIOCore

/// The protocol chores of a benchmark device, on its channel: sends LOGIN when connected,
/// completes the login promise with LOGIN_OK (or fails it with the ERROR), answers
/// HEARTBEATs, ACKs every DATA and READ_RECEIPT frame the gateway sends (DELIVERY,
/// RECEIPT_NOTICE, PUBLISH: the gateway holds further deliveries until they are ACKed) and
/// hands the rest to its ``DeviceBehaviour``. Writes are flushed once per read burst.
final class BenchDeviceHandler: ChannelInboundHandler {
    typealias InboundIn = IMFrame
    typealias OutboundOut = IMFrame

    /// The session id of every frame a benchmark device sends.
    static let sessionID: UInt16 = 1
    /// The LOGIN's sequence; a device numbers its own frames after it.
    static let loginSequence: UInt32 = 1

    private let token: String
    private let deviceID: String
    /// Whether LOGIN asks for RECEIPT_NOTICE frames (the protocol's default) or says 0.
    private let receiptNotices: Bool
    private let login: EventLoopPromise<LoginOK>
    private let behaviour: any DeviceBehaviour
    private var loggedIn = false
    private var loginSettled = false

    init(token: String, deviceID: String, receiptNotices: Bool = true, login: EventLoopPromise<LoginOK>, behaviour: any DeviceBehaviour) {
        self.token = token
        self.deviceID = deviceID
        self.receiptNotices = receiptNotices
        self.login = login
        self.behaviour = behaviour
    }

    func channelActive(context: ChannelHandlerContext) {
        sendLogin(context: context)
        context.fireChannelActive()
    }

    /// Added to a channel that is active already (over WebSocket: once upgraded): log in once
    /// the upgrade has taken the HTTP handlers out (on the next turn of the loop).
    func handlerAdded(context: ChannelHandlerContext) {
        guard context.channel.isActive else { return }
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.execute { bound.value.0.sendLogin(context: bound.value.1) }
    }

    private func sendLogin(context: ChannelHandlerContext) {
        let frame = LoginRequest(token: token, deviceID: deviceID, receiptNotices: receiptNotices ? nil : false).frame(
            sequence: Self.loginSequence, timestamp: MonotonicClock.unixSeconds(), sessionID: Self.sessionID)
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.header.type {
        case .heartbeat:
            context.write(wrapOutboundOut(frame.ack(timestamp: MonotonicClock.unixSeconds())), promise: nil)
        case .ack:
            if loggedIn { behaviour.acked(frame, context: context) }
        case .data, .readReceipt:
            context.write(wrapOutboundOut(frame.ack(timestamp: MonotonicClock.unixSeconds())), promise: nil)
            if loggedIn { behaviour.received(frame, context: context) }
        case .control:
            control(frame, context: context)
        }
    }

    private func control(_ frame: IMFrame, context: ChannelHandlerContext) {
        switch try? IMMessage(frame: frame) {
        case .loginOK(let ok)?:
            guard !loggedIn else { return }
            loggedIn = true
            settle(.success(ok))
            behaviour.loggedIn(ok, context: context)
        case .error(let notice)?:
            settle(.failure(BenchError("\(notice.code) \(notice.message ?? "")")))
        case .kick(let kick)?:
            settle(.failure(BenchError("kicked: \(kick.reason) \(kick.message ?? "")")))
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? BenchEvent {
            behaviour.handle(event, context: context)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        settle(.failure(BenchError("connection closed before LOGIN_OK")))
        if loggedIn { behaviour.closed() }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        settle(.failure(error))
        context.close(promise: nil)
    }

    /// Completes the login promise once.
    private func settle(_ result: Result<LoginOK, any Error>) {
        guard !loginSettled else { return }
        loginSettled = true
        login.completeWith(result)
    }
}
