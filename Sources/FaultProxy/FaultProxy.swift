import NIOCore
import NIOPosix

/// A TCP proxy that injects the faults of a weak mobile network (this machine has no
/// netem): latency, a bandwidth limit, stalls and cuts from a ``FaultProfile``, and, on a
/// test's command, blackholes and refusals.
///
/// ```swift
/// let proxy = try await FaultProxy.start(upstreamPort: gatewayPort)
/// // ... connect the client under test to 127.0.0.1:proxy.port ...
/// proxy.blackholeAll()   // its connection goes silent but stays open
/// _ = try await proxy.waitForStatistics { $0.connectionsAccepted == 2 }   // it reconnected
/// await proxy.stop()
/// ```
///
/// Each accepted connection gets its own connection to the upstream (one per client
/// connection, on the same event loop) and is forwarded with backpressure: a side is read
/// only while the other side is writable and the queue towards it holds less than 1 MiB.
/// Timers run on the connection's event loop; nothing sleeps.
///
/// Semantics of the controls:
/// - **Blackhole** (``blackholeAll()``, ``blackholeNew(_:)``): nothing passes in either
///   direction, and the connection stays open. Both sides keep being *read* and what
///   arrives is discarded (so a writer never blocks, as if the network dropped the
///   packets), and a close is not passed on either: each side stays open until its own
///   peer closes it, a cut, or ``stop()``. Data queued at that moment is dropped. A
///   connection accepted while ``blackholeNew(_:)`` is on never connects to the upstream.
/// - **Cut** (``cutAll()``, ``FaultProfile/cutsPerMinute``): both sides are closed with
///   `SO_LINGER` 0, so both peers see a reset; queued data is lost.
/// - **Refuse** (``refuseNew(_:)``): new connections are accepted by the kernel and reset at
///   once (the client sees its connection reset, or a failed connect).
/// - **Hold** (``holdAll(_:)``): a stall of every connection, open or accepted meanwhile,
///   that lasts until it is turned off: nothing is forwarded, what arrives is read and
///   queued (until the queue limit, then that side is no longer read), and stall and cut
///   timers are suspended. Turning it off delivers everything queued, intact and in order,
///   as TCP's retransmissions arrive when a lost network comes back. With ``refuseNew(_:)``,
///   a network outage that ends.
/// - **Close**: when one side closes (or resets), the other side is closed after what was
///   already queued towards it has been delivered (with its latency), except when the
///   connection is blackholed, cut or stopped. Data still queued towards the closed side is
///   dropped.
///
/// With a `seed`, connection *n* (in the order accepted) draws its latencies, stall and
/// cut times from the same sequence on every run.
///
/// Call ``stop()`` when done: it closes the listener and every connection.
public final class FaultProxy: Sendable {
    /// The port the proxy listens on (the one asked for, or the one the system chose for 0).
    public let port: Int
    /// The host the proxy connects each accepted connection to (the first of ``upstreams``).
    public var upstreamHost: String { core.upstreamHost }
    /// The port the proxy connects each accepted connection to (the first of ``upstreams``).
    public var upstreamPort: Int { core.upstreamPort }
    /// Where accepted connections go: one, or a load balancer's random choice among several.
    public var upstreams: [Upstream] { core.upstreams }

    /// A host and port the proxy forwards to.
    public struct Upstream: Sendable, Hashable {
        public var host: String
        public var port: Int
        public init(host: String = "127.0.0.1", port: Int) {
            self.host = host
            self.port = port
        }
    }

    private let core: ProxyCore
    private let listener: any Channel

    private init(port: Int, core: ProxyCore, listener: any Channel) {
        self.port = port
        self.core = core
        self.listener = listener
    }

    /// Starts a proxy that listens on `listenHost`:`listenPort` and forwards every accepted
    /// connection to `upstreamHost`:`upstreamPort` with the faults of `profile`.
    ///
    /// - Parameters:
    ///   - upstreamHost: The host to forward to.
    ///   - upstreamPort: The port to forward to.
    ///   - listenHost: The address to listen on.
    ///   - listenPort: The port to listen on; 0 lets the system choose (see ``port``).
    ///   - profile: The faults to inject, until ``setProfile(_:)``.
    ///   - seed: Makes the random draws reproducible; nil seeds from the system.
    ///   - group: The event loops for the listener and the connections.
    /// - Throws: The error of binding the listener.
    public static func start(
        upstreamHost: String = "127.0.0.1",
        upstreamPort: Int,
        listenHost: String = "127.0.0.1",
        listenPort: Int = 0,
        profile: FaultProfile = .none,
        seed: UInt64? = nil,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> FaultProxy {
        try await start(
            upstreams: [Upstream(host: upstreamHost, port: upstreamPort)], listenHost: listenHost, listenPort: listenPort,
            profile: profile, seed: seed, group: group)
    }

    /// Starts a proxy in front of several upstreams, as a load balancer: each accepted
    /// connection goes to one drawn at random (from the connection's seeded sequence), and if
    /// that one refuses, to the others in turn; the client's connection is closed only when
    /// none accepts. Otherwise as ``start(upstreamHost:upstreamPort:listenHost:listenPort:profile:seed:group:)``.
    public static func start(
        upstreams: [Upstream],
        listenHost: String = "127.0.0.1",
        listenPort: Int = 0,
        profile: FaultProfile = .none,
        seed: UInt64? = nil,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> FaultProxy {
        guard !upstreams.isEmpty else { throw FaultProxyError.noUpstream }
        let core = ProxyCore(upstreams: upstreams, seed: seed, profile: profile)
        let listener = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 256)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try Self.initialize(channel, core: core)
                }
            }
            .bind(host: listenHost, port: listenPort)
            .get()
        guard let port = listener.localAddress?.port else {
            try? await listener.close()
            throw FaultProxyError.noListeningPort(String(describing: listener.localAddress))
        }
        return FaultProxy(port: port, core: core, listener: listener)
    }

    private static func initialize(_ channel: any Channel, core: ProxyCore) throws {
        switch core.admit(channel) {
        case .stopped:
            channel.close(promise: nil)
        case .refused:
            ProxyConnection.reset(channel)
        case .accepted(let handle, let admitted):
            let connection = handle.connection.value
            let handler = ProxySideHandler(connection: connection, side: .client)
            try channel.pipeline.syncOperations.addHandler(handler)
            connection.start(admitted, clientHandler: handler)
        }
    }

    // MARK: Faults

    /// The profile new connections get.
    public var profile: FaultProfile { core.profile }

    /// Uses `profile` for new connections and, from the next chunk on, for every open one
    /// (the next stall and cut of each are drawn anew with the new rates; a stall under
    /// way runs its course).
    public func setProfile(_ profile: FaultProfile) {
        for handle in core.setProfile(profile) {
            handle.execute { $0.apply(profile) }
        }
    }

    /// Blackholes every open connection: nothing read from either side after this returns
    /// is forwarded, data still queued is dropped, and both sides stay open (see the type's
    /// documentation). Connections accepted later are forwarded normally unless
    /// ``blackholeNew(_:)`` or ``refuseNew(_:)`` is on. Blackholed connections stay so.
    public func blackholeAll() {
        for handle in core.markAllBlackholed() {
            handle.execute { $0.checkControls() }
        }
    }

    /// While `on`, new connections are accepted but blackholed: they look connected and
    /// nothing passes (the upstream is never even connected to). Turning it off affects
    /// only later connections.
    public func blackholeNew(_ on: Bool) {
        core.setBlackholeNew(on)
    }

    /// Cuts every open connection: both sides are closed abruptly (`SO_LINGER` 0, the peers
    /// see a reset) and queued data is lost. Nothing read after this returns is forwarded.
    public func cutAll() {
        for handle in core.markAllCut() {
            handle.execute { $0.checkControls() }
        }
    }

    /// While `on`, new connections are reset as soon as they are accepted, as when the
    /// network is down; open connections are not affected.
    public func refuseNew(_ on: Bool) {
        core.setRefuseNew(on)
    }

    /// While `on`, no connection forwards anything, neither the open ones nor those accepted
    /// meanwhile: both peers see silence and their connections stay open, as when a phone
    /// loses coverage. What arrives is read and queued (up to the queue limit per direction,
    /// then that side is no longer read); a close is queued behind the data. Stalls and cuts
    /// do not begin while on (a stall under way runs its course). Turning it off forwards
    /// everything queued, intact and in order (with the latency each chunk drew), and starts
    /// the stall and cut timers again; unlike ``blackholeAll()`` nothing is lost.
    ///
    /// For a network outage, turn on ``refuseNew(_:)`` as well (a connect without a network
    /// fails), or leave new connections to be held too.
    public func holdAll(_ on: Bool) {
        for handle in core.setHeld(on) {
            handle.execute { on ? $0.holdBegan() : $0.holdEnded() }
        }
    }

    // MARK: Statistics

    /// The counters now.
    public var statistics: Statistics { core.statistics }

    /// The current statistics, then the statistics after every change (only the newest if
    /// the reader is slower than the changes). The stream finishes after ``stop()``.
    public func statisticsUpdates() -> AsyncStream<Statistics> {
        core.statisticsUpdates()
    }

    /// Waits until the statistics satisfy `predicate` and returns them; for tests that need
    /// "the client has reconnected" (`{ $0.connectionsAccepted >= 2 }`) or "every connection
    /// closed" (`{ $0.connectionsOpen == 0 }`).
    ///
    /// - Throws: ``FaultProxyError/timedOut(_:)`` with the last statistics after `timeout`,
    ///   or `CancellationError`.
    public func waitForStatistics(
        timeout: Duration = .seconds(30),
        until predicate: @escaping @Sendable (Statistics) -> Bool
    ) async throws -> Statistics {
        let updates = statisticsUpdates()
        let core = self.core
        return try await withThrowingTaskGroup(of: Statistics.self) { group in
            group.addTask {
                for await statistics in updates where predicate(statistics) { return statistics }
                try Task.checkCancellation()
                throw FaultProxyError.timedOut(core.statistics)   // stopped before it matched
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                throw FaultProxyError.timedOut(core.statistics)
            }
            defer { group.cancelAll() }
            guard let statistics = try await group.next() else { throw CancellationError() }
            return statistics
        }
    }

    // MARK: Stopping

    /// Closes the listener and every connection (plainly, not with a reset), and returns when
    /// all are closed. Later connection attempts are refused by the system.
    public func stop() async {
        let handles = core.beginStop()
        try? await listener.close()
        for handle in handles {
            try? await handle.submit { $0.shutdown() }.get()
        }
        core.finishWatchers()
    }
}
