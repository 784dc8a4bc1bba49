import NIOCore
import NIOPosix
import Synchronization

/// A tiny upstream for the proxy, on 127.0.0.1 and a port the system chooses.
final class TestServer: Sendable {
    enum Mode: Sendable {
        /// Writes back whatever it reads.
        case echo
        /// Writes these bytes as soon as a client connects, then closes.
        case sendThenClose([UInt8])
    }

    struct Counts: Sendable, Equatable {
        var accepted = 0
        var open = 0
    }

    let port: Int
    private let channel: any Channel
    private let counter: Counter

    /// Connections accepted and still open, on the server's side.
    var counts: Counts { counter.counts.withLock { $0 } }

    private init(port: Int, channel: any Channel, counter: Counter) {
        self.port = port
        self.channel = channel
        self.counter = counter
    }

    static func start(_ mode: Mode = .echo) async throws -> TestServer {
        let counter = Counter()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ServerHandler(mode: mode, counter: counter))
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        return TestServer(port: channel.localAddress!.port!, channel: channel, counter: counter)
    }

    func stop() async {
        try? await channel.close()
    }
}

/// The server's counts, shared with its handlers on every event loop.
private final class Counter: Sendable {
    let counts = Mutex(TestServer.Counts())

    func update(_ body: (inout TestServer.Counts) -> Void) {
        counts.withLock { body(&$0) }
    }
}

private final class ServerHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let mode: TestServer.Mode
    let counter: Counter

    init(mode: TestServer.Mode, counter: Counter) {
        self.mode = mode
        self.counter = counter
    }

    func channelActive(context: ChannelHandlerContext) {
        counter.update {
            $0.accepted += 1
            $0.open += 1
        }
        if case .sendThenClose(let bytes) = mode {
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(bytes: bytes))).assumeIsolated().whenComplete { _ in
                context.close(promise: nil)
            }
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        counter.update { $0.open -= 1 }
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .echo = mode {
            context.writeAndFlush(data, promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
