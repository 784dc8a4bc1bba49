import NIOCore
import NIOPosix

/// One proxied connection: the accepted channel, the channel to the upstream, a
/// ``DelayLine`` per direction and the fault timers. Lives on the accepted channel's event
/// loop, which the upstream channel shares; every method must be called there. (Members
/// are internal rather than private only for ProxyConnection+Faults.swift.)
final class ProxyConnection {
    enum Phase {
        /// Created, not yet started.
        case admitted
        /// Waiting for the upstream connection.
        case connecting
        /// Forwarding (or blackholed).
        case open
        /// Cut or stopped: both sides are being closed, nothing is forwarded.
        case closing
        /// Both sides closed.
        case finished
    }

    /// One direction's queue and the state of its write side.
    final class Pipe {
        var line = DelayLine()
        var timer: Scheduled<Void>?
        var lastWrite: EventLoopFuture<Void>?
        /// The sink is closed or being closed: whatever arrives for it is discarded.
        var sinkClosed = false
    }

    /// The most a direction queues (latency, bandwidth, stall) before it stops reading.
    static let queueLimit = 1 << 20

    let number: Int
    let eventLoop: any EventLoop
    let core: ProxyCore
    let client: any Channel
    var server: (any Channel)?
    var clientHandler: ProxySideHandler?
    var serverHandler: ProxySideHandler?
    var phase = Phase.admitted
    var profile = FaultProfile.none
    var random = FaultRandom(seed: 0)
    var blackholed = false
    var wasCut = false
    var stalled = false
    var clientClosed = false
    var serverClosed = false
    let upstream = Pipe()
    let downstream = Pipe()
    var stallEnd: Scheduled<Void>?
    var nextStall: Scheduled<Void>?
    var nextCut: Scheduled<Void>?
    let finishedPromise: EventLoopPromise<Void>

    init(number: Int, client: any Channel, core: ProxyCore) {
        self.number = number
        self.client = client
        self.core = core
        self.eventLoop = client.eventLoop
        self.finishedPromise = client.eventLoop.makePromise()
    }

    // MARK: Lifecycle

    /// Starts forwarding: connects to the upstream, or, when admitted blackholed, never
    /// does (the client sees a connection on which nothing ever arrives).
    func start(_ admitted: ProxyCore.Admitted, clientHandler: ProxySideHandler) {
        guard phase == .admitted else { return }
        self.clientHandler = clientHandler
        profile = admitted.profile
        random = FaultRandom(proxySeed: admitted.seed, connection: number)
        client.closeFuture.assumeIsolated().whenComplete { _ in self.sideClosed(.client) }
        if admitted.blackholed {
            blackholed = true
            serverClosed = true
            phase = .open
            clientHandler.resumeReading()
            return
        }
        phase = .connecting
        let upstreams = core.upstreams
        // Behind several upstreams the proxy is a load balancer: a random one first, then the
        // others in turn if it refuses.
        let first = upstreams.count > 1 ? Int(random.next() % UInt64(upstreams.count)) : 0
        connectUpstream(order: (0..<upstreams.count).map { upstreams[(first + $0) % upstreams.count] })
    }

    /// Connects to the first of `order`; on a failure, to the next.
    func connectUpstream(order: [FaultProxy.Upstream]) {
        guard let target = order.first else { return }
        let bound = NIOLoopBound(self, eventLoop: eventLoop)
        ClientBootstrap(group: eventLoop)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connectTimeout(.seconds(10))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        ProxySideHandler(connection: bound.value, side: .server)
                    )
                }
            }
            .connect(host: target.host, port: target.port)
            .assumeIsolated()
            .whenComplete { result in
                if case .failure = result, order.count > 1, self.phase == .connecting {
                    self.core.updateStatistics { $0.upstreamConnectFailures += 1 }
                    self.connectUpstream(order: Array(order.dropFirst()))
                    return
                }
                self.upstreamConnected(result)
            }
    }

    func upstreamConnected(_ result: Result<any Channel, any Error>) {
        guard case .success(let channel) = result else {
            core.updateStatistics { $0.upstreamConnectFailures += 1 }
            serverClosed = true
            if clientClosed { finish() } else { client.close(promise: nil) }
            return
        }
        server = channel
        // Taken from the channel that won: with a name that resolves to several addresses,
        // losing attempts had handlers too.
        serverHandler = try? channel.pipeline.syncOperations.handler(type: ProxySideHandler.self)
        channel.closeFuture.assumeIsolated().whenComplete { _ in self.sideClosed(.server) }
        guard phase == .connecting else {
            // Cut or stopped while connecting.
            if wasCut { Self.reset(channel) } else { channel.close(promise: nil) }
            return
        }
        guard serverHandler != nil else {
            // Not expected: the initializer always adds the handler.
            phase = .closing
            channel.close(promise: nil)
            client.close(promise: nil)
            return
        }
        phase = .open
        if !checkControls() {
            scheduleNextStall()
            scheduleNextCut()
            for direction in ProxyDirection.allCases { pump(direction) }
        }
        resumeReading(.client)
        resumeReading(.server)
    }

    /// A side's channel closed: what was queued for it is dropped, and the other side is
    /// closed after what is queued for it was delivered (not when blackholed, cut or
    /// stopped).
    func sideClosed(_ side: ProxySide) {
        switch side {
        case .client:
            clientClosed = true
            clientHandler = nil
        case .server:
            serverClosed = true
            serverHandler = nil
        }
        let inward = pipe(ProxyDirection(into: side))
        inward.sinkClosed = true
        inward.timer?.cancel()
        inward.timer = nil
        let dropped = inward.line.removeAll()
        if dropped > 0 { core.updateStatistics { $0.bytesDiscarded += dropped } }

        if (phase == .open || phase == .connecting) && !blackholed {
            let outward = ProxyDirection(from: side)
            pipe(outward).line.enqueueEnd(arrival: .now(), latency: drawLatency())
            pump(outward)
        }
        if clientClosed && serverClosed { finish() }
    }

    func finish() {
        guard phase != .finished else { return }
        phase = .finished
        cancelTimers()
        for direction in ProxyDirection.allCases {
            let pipe = pipe(direction)
            pipe.timer?.cancel()
            pipe.timer = nil
            _ = pipe.line.removeAll()
        }
        clientHandler = nil
        serverHandler = nil
        core.connectionFinished(number)
        finishedPromise.succeed()
    }

    /// Closes both sides (for ``FaultProxy/stop()``) and returns when both are closed.
    func shutdown() -> EventLoopFuture<Void> {
        if phase != .finished && phase != .closing {
            phase = .closing
            dropEverything()
            client.close(promise: nil)
            server?.close(promise: nil)
        }
        return finishedPromise.futureResult
    }

    // MARK: Data

    func received(_ bytes: ByteBuffer, from side: ProxySide) {
        let direction = ProxyDirection(from: side)
        let pipe = pipe(direction)
        if checkControls() || pipe.sinkClosed {
            core.updateStatistics { $0.bytesDiscarded += bytes.readableBytes }
            return
        }
        pipe.line.enqueue(bytes, arrival: .now(), latency: drawLatency(), bandwidth: profile.effectiveBandwidth)
        pump(direction)
    }

    func writabilityChanged(_ side: ProxySide) {
        pump(ProxyDirection(into: side))
    }

    /// Whether `side` may be read: when the connection forwards and the direction from it
    /// has room (its sink is writable and its queue below ``queueLimit``), or when what is
    /// read is discarded anyway.
    func mayRead(from side: ProxySide) -> Bool {
        guard phase == .open else { return false }
        if blackholed { return true }
        let direction = ProxyDirection(from: side)
        let pipe = pipe(direction)
        if pipe.sinkClosed { return true }
        guard let sink = channel(direction.sink), sink.isWritable else { return false }
        return pipe.line.queuedBytes < Self.queueLimit
    }

    /// Writes every due chunk while the sink is writable, closes the sink once the source
    /// closed and everything was delivered, and sets a timer for the next due chunk. Does
    /// nothing while stalled or held (the end of the stall or hold pumps again).
    func pump(_ direction: ProxyDirection) {
        let pipe = pipe(direction)
        guard phase == .open, !blackholed, !stalled, !isHeld, !pipe.sinkClosed,
            let sink = channel(direction.sink), let handler = handler(direction.sink)
        else { return }
        let now = NIODeadline.now()
        var written = 0
        while sink.isWritable, let bytes = pipe.line.popDue(now: now) {
            pipe.lastWrite = handler.write(bytes)
            written += bytes.readableBytes
        }
        if written > 0 {
            handler.flush()
            core.updateStatistics { statistics in
                switch direction {
                case .upstream: statistics.bytesUpstream += written
                case .downstream: statistics.bytesDownstream += written
                }
            }
        }
        if pipe.line.isFinished(now: now) {
            closeSink(direction)
            return
        }
        if pipe.timer == nil, let due = pipe.line.nextDue, due > now {
            pipe.timer = eventLoop.assumeIsolated().scheduleTask(deadline: due) {
                pipe.timer = nil
                self.pump(direction)
            }
        }
        resumeReading(direction.source)
    }

    /// Closes the sink of `direction` once its last write completed.
    func closeSink(_ direction: ProxyDirection) {
        let pipe = pipe(direction)
        pipe.sinkClosed = true
        pipe.timer?.cancel()
        pipe.timer = nil
        guard let sink = channel(direction.sink) else { return }
        if let lastWrite = pipe.lastWrite {
            lastWrite.assumeIsolated().whenComplete { _ in sink.close(promise: nil) }
        } else {
            sink.close(promise: nil)
        }
    }

    func resumeReading(_ side: ProxySide) {
        if mayRead(from: side) { handler(side)?.resumeReading() }
    }

    // MARK: Helpers

    func pipe(_ direction: ProxyDirection) -> Pipe {
        direction == .upstream ? upstream : downstream
    }

    func channel(_ side: ProxySide) -> (any Channel)? {
        side == .client ? client : server
    }

    func handler(_ side: ProxySide) -> ProxySideHandler? {
        side == .client ? clientHandler : serverHandler
    }

    func drawLatency() -> TimeAmount {
        profile.latency.map { random.uniform($0) } ?? .zero
    }
}
