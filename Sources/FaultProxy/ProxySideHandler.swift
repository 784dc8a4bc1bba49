import NIOCore

/// The side of a proxied connection a channel faces.
enum ProxySide: Sendable {
    /// The accepted connection, to the client.
    case client
    /// The connection the proxy opened to the upstream server.
    case server
}

/// One direction of a proxied connection.
enum ProxyDirection: Sendable, CaseIterable {
    /// Client to server.
    case upstream
    /// Server to client.
    case downstream

    /// The direction whose data comes from `side`.
    init(from side: ProxySide) {
        self = side == .client ? .upstream : .downstream
    }

    /// The direction whose data goes to `side`.
    init(into side: ProxySide) {
        self = side == .server ? .upstream : .downstream
    }

    /// Where the data comes from.
    var source: ProxySide { self == .upstream ? .client : .server }
    /// Where the data goes.
    var sink: ProxySide { self == .upstream ? .server : .client }
}

/// The I/O end of one side of a ``ProxyConnection``: hands reads, writability changes and
/// its context to the connection, and holds back `read()` while the connection says this
/// side must not be read (backpressure), until ``resumeReading()``.
final class ProxySideHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let connection: ProxyConnection
    private let side: ProxySide
    private var context: ChannelHandlerContext?
    private var readHeldBack = false

    init(connection: ProxyConnection, side: ProxySide) {
        self.connection = connection
        self.side = side
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        connection.received(unwrapInboundIn(data), from: side)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        connection.writabilityChanged(side)
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A reset or a failed write: the side is gone; closing it lets the connection react.
        context.close(promise: nil)
    }

    func read(context: ChannelHandlerContext) {
        if connection.mayRead(from: side) {
            context.read()
        } else {
            readHeldBack = true
        }
    }

    /// Issues the read held back by ``read(context:)``, if any.
    func resumeReading() {
        guard readHeldBack, let context else { return }
        readHeldBack = false
        context.read()
    }

    /// Writes `bytes` without flushing; nil once the handler is gone.
    func write(_ bytes: ByteBuffer) -> EventLoopFuture<Void>? {
        context?.write(wrapOutboundOut(bytes))
    }

    func flush() {
        context?.flush()
    }
}
