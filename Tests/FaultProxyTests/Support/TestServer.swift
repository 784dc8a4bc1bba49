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
        /// Keeps what it reads; yields it on ``TestServer/received`` when the client closes.
        case collect
    }

    struct Counts: Sendable, Equatable {
        var accepted = 0
        var open = 0
    }

    let port: Int
    /// In `.collect` mode, everything one connection sent, when it closed.
    let received: AsyncStream<[UInt8]>
    private let channel: any Channel
    private let counter: Counter

    /// Connections accepted and still open, on the server's side.
    var counts: Counts { counter.counts.withLock { $0 } }

    private init(port: Int, channel: any Channel, counter: Counter, received: AsyncStream<[UInt8]>) {
        self.port = port
        self.received = received
        self.channel = channel
        self.counter = counter
    }

    static func start(_ mode: Mode = .echo) async throws -> TestServer {
        let counter = Counter()
        let (received, sink) = AsyncStream.makeStream(of: [UInt8].self)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ServerHandler(mode: mode, counter: counter, sink: sink))
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        return TestServer(port: channel.localAddress!.port!, channel: channel, counter: counter, received: received)
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
    let sink: AsyncStream<[UInt8]>.Continuation
    var collected: [UInt8] = []

    init(mode: TestServer.Mode, counter: Counter, sink: AsyncStream<[UInt8]>.Continuation) {
        self.mode = mode
        self.counter = counter
        self.sink = sink
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
        if case .collect = mode { sink.yield(collected) }
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch mode {
        case .echo:
            context.writeAndFlush(data, promise: nil)
        case .collect:
            var buffer = unwrapInboundIn(data)
            collected += buffer.readBytes(length: buffer.readableBytes) ?? []
        case .sendThenClose:
            break
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
