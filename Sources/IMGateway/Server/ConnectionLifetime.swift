import NIOCore

/// A device connection's place in the gateway's counts (open connections, logged-in
/// devices, `limits.max_connections_*`) and the promise of its end, completed once when the
/// channel has closed and the MQTT session has ended.
struct ConnectionLifetime {
    /// Its place in `limits.max_connections_*` (nil: not counted).
    let admission: ConnectionAdmissions.Ticket?
    let statistics: GatewayStatistics
    /// Completed once the connection has finished; from ``opened(on:)``.
    private(set) var finished: EventLoopPromise<Void>?

    init(admission: ConnectionAdmissions.Ticket?, statistics: GatewayStatistics) {
        self.admission = admission
        self.statistics = statistics
    }

    /// The handler is in place on `loop`: the connection counts from now until it finishes.
    mutating func opened(on loop: any EventLoop) {
        let finished = loop.makePromise(of: Void.self)
        self.finished = finished
        let connections = self.statistics.connections
        connections.enter()
        let admission = self.admission
        finished.futureResult.whenComplete { _ in
            admission?.closed()
            connections.leave()
        }
    }

    /// LOGIN_OK was sent.
    func loggedIn() {
        self.admission?.loggedIn()
        self.statistics.loggedIn.add(1, ordering: .relaxed)
    }

    /// The session of a connection that logged in is ending.
    func loggedOut() {
        self.statistics.loggedIn.subtract(1, ordering: .relaxed)
    }

    /// The connection has finished.
    func finish() {
        self.finished?.succeed(())
    }
}
