import NIOCore

/// A device connection's place in the gateway's counts (open connections, logged-in
/// devices, `limits.max_connections_*`) and the promise of its end, kept once when the channel
/// has closed and the MQTT session has ended.
struct ConnectionLifetime {
    /// Its place in `limits.max_connections_*` (nil: not counted).
    let admission: ConnectionAdmissions.Ticket?
    let statistics: GatewayStatistics
    /// The counts of the connection's transport.
    let counters: TransportCounters
    /// The event loop of the connection, from ``opened(on:)``.
    private(set) var eventLoop: (any EventLoop)?
    private var phase = Phase.new
    /// Whoever waits for the end (``whenFinished(_:)``); made when first asked, which few
    /// connections are (a newer login of the device, shutdown).
    private var waiters: EventLoopPromise<Void>?

    private enum Phase { case new, open, finished }

    init(admission: ConnectionAdmissions.Ticket?, statistics: GatewayStatistics, transport: DeviceTransport) {
        self.admission = admission
        self.statistics = statistics
        self.counters = statistics.transport(transport)
    }

    /// The handler is in place on `loop`: the connection counts from now until it finishes.
    mutating func opened(on loop: any EventLoop) {
        guard phase == .new else { return }
        eventLoop = loop
        phase = .open
        statistics.connections.enter()
        counters.connections.add(1, ordering: .relaxed)
    }

    /// LOGIN_OK was sent.
    func loggedIn() {
        self.admission?.loggedIn()
        self.counters.loggedIn.add(1, ordering: .relaxed)
        self.counters.logins.add(1, ordering: .relaxed)
    }

    /// The session of a connection that logged in is ending.
    func loggedOut() {
        self.counters.loggedIn.subtract(1, ordering: .relaxed)
    }

    /// Completes `promise` once the connection has finished (at once if it has).
    mutating func whenFinished(_ promise: EventLoopPromise<Void>) {
        if phase == .finished { return promise.succeed(()) }
        if let waiters {
            waiters.futureResult.cascade(to: promise)
        } else {
            waiters = promise
        }
    }

    /// The connection has finished: it no longer counts, and whoever waits is told.
    mutating func finish() {
        guard phase == .open else { return }
        phase = .finished
        admission?.closed()
        statistics.connections.leave()
        counters.connections.subtract(1, ordering: .relaxed)
        waiters?.succeed(())
        waiters = nil
    }
}
