#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore
import NIOPosix

/// How a test client's connection ended.
enum CloseReason: Sendable, Equatable {
    /// An orderly close (FIN) from the peer, or a close by the client itself.
    case closed
    /// The peer reset the connection.
    case reset
    /// Another error.
    case error(String)
}

enum TestClientError: Error, Equatable {
    /// Fewer than the wanted bytes arrived in time; how many were there.
    case timedOut(received: Int)
    /// The connection ended before the wanted bytes arrived; how, and how many were there.
    case closed(CloseReason, received: Int)
}

/// A TCP client for the tests: everything it receives is collected on its event loop, and
/// reads wait for a byte count with a timeout scheduled on that loop (no sleeping).
final class TestClient: Sendable {
    let channel: any Channel
    private let collector: NIOLoopBound<Collector>

    private init(channel: any Channel, collector: NIOLoopBound<Collector>) {
        self.channel = channel
        self.collector = collector
    }

    /// Connects to `host`:`port`; with `reading` false nothing is read until
    /// ``startReading()`` (a stalled application, for backpressure).
    static func connect(port: Int, host: String = "127.0.0.1", reading: Bool = true) async throws -> TestClient {
        let (channel, collector) = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelOption(.autoRead, value: reading)
            .connectTimeout(.seconds(10))
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let collector = Collector()
                    try channel.pipeline.syncOperations.addHandler(collector)
                    return (channel, NIOLoopBound(collector, eventLoop: channel.eventLoop))
                }
            }
        return TestClient(channel: channel, collector: collector)
    }

    /// Whether the connection is still open.
    var isOpen: Bool { channel.isActive }

    func startReading() async throws {
        try await channel.setOption(.autoRead, value: true).get()
    }

    func send(_ bytes: [UInt8]) async throws {
        try await channel.writeAndFlush(ByteBuffer(bytes: bytes)).get()
    }

    /// The next `count` bytes received, waiting at most `timeout`.
    func read(count: Int, timeout: TimeAmount = .seconds(20)) async throws -> [UInt8] {
        let collector = self.collector
        return try await channel.eventLoop.flatSubmit {
            collector.value.wait(for: count, timeout: timeout)
        }.get()
    }

    /// How the connection ended, waiting at most `timeout` for it to end.
    func closeReason(timeout: TimeAmount = .seconds(20)) async throws -> CloseReason {
        let collector = self.collector
        return try await channel.eventLoop.flatSubmit {
            collector.value.waitForClose(timeout: timeout)
        }.get()
    }

    func close() async {
        try? await channel.close()
    }
}

/// Collects what a ``TestClient`` receives and serves its waits; on the channel's loop.
final class Collector: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private var received: [UInt8] = []
    private var ended: CloseReason?
    private var lastError: (any Error)?
    private var reader: (count: Int, promise: EventLoopPromise<[UInt8]>, timer: Scheduled<Void>)?
    private var closeWaiters: [(promise: EventLoopPromise<CloseReason>, timer: Scheduled<Void>)] = []
    private var eventLoop: (any EventLoop)?

    func handlerAdded(context: ChannelHandlerContext) {
        eventLoop = context.eventLoop
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        received += buffer.readBytes(length: buffer.readableBytes) ?? []
        serveReader()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        lastError = error
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        switch lastError {
        case nil: ended = .closed
        case let error as IOError where error.errnoCode == ECONNRESET: ended = .reset
        case let error?: ended = .error(String(describing: error))
        }
        serveReader()
        for waiter in closeWaiters {
            waiter.timer.cancel()
            waiter.promise.succeed(ended!)
        }
        closeWaiters = []
    }

    func wait(for count: Int, timeout: TimeAmount) -> EventLoopFuture<[UInt8]> {
        guard let eventLoop else { preconditionFailure("collector not in a pipeline") }
        precondition(reader == nil, "one read at a time")
        let promise = eventLoop.makePromise(of: [UInt8].self)
        let timer = eventLoop.assumeIsolated().scheduleTask(in: timeout) {
            guard let reader = self.reader else { return }
            self.reader = nil
            reader.promise.fail(TestClientError.timedOut(received: self.received.count))
        }
        reader = (count, promise, timer)
        serveReader()
        return promise.futureResult
    }

    func waitForClose(timeout: TimeAmount) -> EventLoopFuture<CloseReason> {
        guard let eventLoop else { preconditionFailure("collector not in a pipeline") }
        if let ended { return eventLoop.makeSucceededFuture(ended) }
        let promise = eventLoop.makePromise(of: CloseReason.self)
        let timer = eventLoop.assumeIsolated().scheduleTask(in: timeout) {
            self.closeWaiters.removeAll { $0.promise.futureResult === promise.futureResult }
            promise.fail(TestClientError.timedOut(received: self.received.count))
        }
        closeWaiters.append((promise, timer))
        return promise.futureResult
    }

    private func serveReader() {
        guard let reader else { return }
        if received.count >= reader.count {
            self.reader = nil
            reader.timer.cancel()
            let bytes = Array(received.prefix(reader.count))
            received.removeFirst(reader.count)
            reader.promise.succeed(bytes)
        } else if let ended {
            self.reader = nil
            reader.timer.cancel()
            reader.promise.fail(TestClientError.closed(ended, received: received.count))
        }
    }
}
