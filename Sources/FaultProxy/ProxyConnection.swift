#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore
import NIOPosix

/// One proxied connection: the accepted channel, the channel to the upstream, a
/// ``DelayLine`` per direction and the fault timers. Lives on the accepted channel's event
/// loop, which the upstream channel shares; every method must be called there.
final class ProxyConnection {
    private enum Phase {
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
    private final class Pipe {
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
    private let core: ProxyCore
    private let client: any Channel
    private var server: (any Channel)?
    private var clientHandler: ProxySideHandler?
    private var serverHandler: ProxySideHandler?
    private var phase = Phase.admitted
    private var profile = FaultProfile.none
    private var random = FaultRandom(seed: 0)
    private var blackholed = false
    private var wasCut = false
    private var stalled = false
    private var clientClosed = false
    private var serverClosed = false
    private let upstream = Pipe()
    private let downstream = Pipe()
    private var stallEnd: Scheduled<Void>?
    private var nextStall: Scheduled<Void>?
    private var nextCut: Scheduled<Void>?
    private let finishedPromise: EventLoopPromise<Void>

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
    func start(_ admitted: ProxyCore.Admitted) {
        guard phase == .admitted else { return }
        profile = admitted.profile
        random = FaultRandom(proxySeed: admitted.seed, connection: number)
        client.closeFuture.assumeIsolated().whenComplete { _ in self.sideClosed(.client) }
        if admitted.blackholed {
            blackholed = true
            serverClosed = true
            phase = .open
            clientHandler?.resumeReading()
            return
        }
        phase = .connecting
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
            .connect(host: core.upstreamHost, port: core.upstreamPort)
            .assumeIsolated()
            .whenComplete { result in self.upstreamConnected(result) }
    }

    private func upstreamConnected(_ result: Result<any Channel, any Error>) {
        guard case .success(let channel) = result else {
            core.updateStatistics { $0.upstreamConnectFailures += 1 }
            serverClosed = true
            if clientClosed { finish() } else { client.close(promise: nil) }
            return
        }
        server = channel
        channel.closeFuture.assumeIsolated().whenComplete { _ in self.sideClosed(.server) }
        guard phase == .connecting else {
            // Cut or stopped while connecting.
            if wasCut { Self.reset(channel) } else { channel.close(promise: nil) }
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

    func attach(_ handler: ProxySideHandler, to side: ProxySide) {
        switch side {
        case .client: clientHandler = handler
        case .server: serverHandler = handler
        }
    }

    /// A side's channel closed: what was queued for it is dropped, and the other side is
    /// closed after what is queued for it was delivered (not when blackholed, cut or
    /// stopped).
    private func sideClosed(_ side: ProxySide) {
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

    private func finish() {
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

    // MARK: Controls

    /// Stops forwarding for good: both directions' queues are dropped, both sides keep
    /// being read and what arrives is discarded, and a close of one side is not passed to
    /// the other.
    func blackhole() {
        guard phase == .open || phase == .connecting, !blackholed else { return }
        blackholed = true
        core.updateStatistics { $0.blackholed += 1 }
        dropEverything()
        resumeReading(.client)
        resumeReading(.server)
    }

    /// Closes both sides abruptly (`SO_LINGER` 0: the peers see a reset).
    func cut() {
        guard phase == .open || phase == .connecting else { return }
        phase = .closing
        wasCut = true
        core.updateStatistics { $0.cuts += 1 }
        dropEverything()
        Self.reset(client)
        if let server { Self.reset(server) }
    }

    /// Uses `profile` from now on: for chunks that arrive later, and for the next stall
    /// and cut, which are drawn anew (a Poisson process has no memory).
    func apply(_ profile: FaultProfile) {
        self.profile = profile
        scheduleNextStall()
        scheduleNextCut()
    }

    /// Applies a blackholeAll or cutAll that happened since this connection last looked;
    /// true if the connection no longer forwards.
    @discardableResult
    func checkControls() -> Bool {
        if number < core.cutBelow.load(ordering: .acquiring) {
            cut()
        } else if !blackholed && number < core.blackholedBelow.load(ordering: .acquiring) {
            blackhole()
        }
        return phase != .open || blackholed
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
    /// closed and everything was delivered, and sets a timer for the next due chunk.
    private func pump(_ direction: ProxyDirection) {
        let pipe = pipe(direction)
        guard phase == .open, !blackholed, !stalled, !pipe.sinkClosed,
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
    private func closeSink(_ direction: ProxyDirection) {
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

    private func resumeReading(_ side: ProxySide) {
        if mayRead(from: side) { handler(side)?.resumeReading() }
    }

    // MARK: Stalls and cuts

    private func scheduleNextStall() {
        nextStall?.cancel()
        nextStall = nil
        guard phase == .open, !blackholed, !stalled, let rate = profile.effectiveStallRate else { return }
        nextStall = eventLoop.assumeIsolated().scheduleTask(in: random.exponential(perMinute: rate)) {
            self.nextStall = nil
            self.beginStall()
        }
    }

    private func beginStall() {
        guard phase == .open, !blackholed, !stalled else { return }
        stalled = true
        core.updateStatistics { $0.stalls += 1 }
        stallEnd = eventLoop.assumeIsolated().scheduleTask(in: random.uniform(profile.stallDuration)) {
            self.stallEnd = nil
            self.stalled = false
            for direction in ProxyDirection.allCases { self.pump(direction) }
            self.scheduleNextStall()
        }
    }

    private func scheduleNextCut() {
        nextCut?.cancel()
        nextCut = nil
        guard phase == .open, !blackholed, let rate = profile.effectiveCutRate else { return }
        nextCut = eventLoop.assumeIsolated().scheduleTask(in: random.exponential(perMinute: rate)) {
            self.nextCut = nil
            self.cut()
        }
    }

    // MARK: Helpers

    private func pipe(_ direction: ProxyDirection) -> Pipe {
        direction == .upstream ? upstream : downstream
    }

    private func channel(_ side: ProxySide) -> (any Channel)? {
        side == .client ? client : server
    }

    private func handler(_ side: ProxySide) -> ProxySideHandler? {
        side == .client ? clientHandler : serverHandler
    }

    private func drawLatency() -> TimeAmount {
        profile.latency.map { random.uniform($0) } ?? .zero
    }

    private func cancelTimers() {
        stallEnd?.cancel()
        stallEnd = nil
        stalled = false
        nextStall?.cancel()
        nextStall = nil
        nextCut?.cancel()
        nextCut = nil
    }

    /// Cancels the fault timers and drops both queues, counting the bytes as discarded.
    private func dropEverything() {
        cancelTimers()
        var dropped = 0
        for direction in ProxyDirection.allCases {
            let pipe = pipe(direction)
            pipe.timer?.cancel()
            pipe.timer = nil
            dropped += pipe.line.removeAll()
        }
        if dropped > 0 { core.updateStatistics { [dropped] in $0.bytesDiscarded += dropped } }
    }

    /// Closes `channel` with `SO_LINGER` 0, so that the peer sees a reset.
    static func reset(_ channel: any Channel) {
        guard let options = channel as? any SocketOptionProvider else {
            channel.close(promise: nil)
            return
        }
        options.setSoLinger(linger(l_onoff: 1, l_linger: 0)).whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}
