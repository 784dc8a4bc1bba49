import NIOCore
import Synchronization

/// A connection as the shared state sees it: its event loop and the connection, which may
/// only be touched there.
struct ConnectionHandle: Sendable {
    let eventLoop: any EventLoop
    let connection: NIOLoopBound<ProxyConnection>

    /// Runs `body` with the connection on its event loop.
    func execute(_ body: @escaping @Sendable (ProxyConnection) -> Void) {
        let connection = self.connection
        eventLoop.execute { body(connection.value) }
    }

    /// Runs `body` with the connection on its event loop and returns its future.
    func submit(_ body: @escaping @Sendable (ProxyConnection) -> EventLoopFuture<Void>) -> EventLoopFuture<Void> {
        let connection = self.connection
        return eventLoop.flatSubmit { body(connection.value) }
    }
}

/// The state a ``FaultProxy`` shares with its connections on every event loop: settings,
/// switches, the live connections and the statistics, behind one mutex; plus atomics that
/// connections read on every chunk so that ``FaultProxy/blackholeAll()``,
/// ``FaultProxy/cutAll()`` and ``FaultProxy/holdAll(_:)`` take effect for data read after
/// they return.
final class ProxyCore: Sendable {
    struct State {
        var profile: FaultProfile
        var blackholeNew = false
        var refuseNew = false
        var stopped = false
        var nextNumber = 0
        var connections: [Int: ConnectionHandle] = [:]
        var statistics = FaultProxy.Statistics()
        var watchers: [Int: AsyncStream<FaultProxy.Statistics>.Continuation] = [:]
        var nextWatcher = 0
    }

    /// What a connection is told when it is admitted.
    struct Admitted: Sendable {
        var number: Int
        var profile: FaultProfile
        var blackholed: Bool
        var seed: UInt64?
    }

    enum Admission: Sendable {
        case accepted(ConnectionHandle, Admitted)
        case refused
        case stopped
    }

    /// Where connections are forwarded (one, or a load balancer's choice among several).
    let upstreams: [FaultProxy.Upstream]
    var upstreamHost: String { upstreams[0].host }
    var upstreamPort: Int { upstreams[0].port }
    let seed: UInt64?
    private let state: Mutex<State>
    /// Connections numbered below this are blackholed (blackholeAll).
    let blackholedBelow = Atomic<Int>(0)
    /// Connections numbered below this are cut (cutAll).
    let cutBelow = Atomic<Int>(0)
    /// Whether every connection holds what it reads instead of forwarding it (holdAll).
    let held = Atomic<Bool>(false)

    init(upstreams: [FaultProxy.Upstream], seed: UInt64?, profile: FaultProfile) {
        precondition(!upstreams.isEmpty, "a proxy needs an upstream")
        self.upstreams = upstreams
        self.seed = seed
        self.state = Mutex(State(profile: profile))
    }

    // MARK: Connections

    /// Decides, on `channel`'s event loop, whether a new connection is forwarded, and if so
    /// creates and registers it in the same critical section as it reads the profile (so a
    /// concurrent ``setProfile(_:)`` reaches it either way).
    func admit(_ channel: any Channel) -> Admission {
        state.withLock { state in
            if state.stopped { return .stopped }
            if state.refuseNew {
                state.statistics.connectionsRefused += 1
                Self.notify(&state)
                return .refused
            }
            let number = state.nextNumber
            state.nextNumber += 1
            let connection = ProxyConnection(number: number, client: channel, core: self)
            let handle = ConnectionHandle(
                eventLoop: channel.eventLoop,
                connection: NIOLoopBound(connection, eventLoop: channel.eventLoop)
            )
            state.connections[number] = handle
            state.statistics.connectionsAccepted += 1
            state.statistics.connectionsOpen += 1
            if state.blackholeNew { state.statistics.blackholed += 1 }
            Self.notify(&state)
            let admitted = Admitted(number: number, profile: state.profile, blackholed: state.blackholeNew, seed: seed)
            return .accepted(handle, admitted)
        }
    }

    /// Forgets a connection closed on both sides.
    func connectionFinished(_ number: Int) {
        state.withLock { state in
            guard state.connections.removeValue(forKey: number) != nil else { return }
            state.statistics.connectionsOpen -= 1
            Self.notify(&state)
        }
    }

    /// Every live connection.
    var connections: [ConnectionHandle] {
        state.withLock { Array($0.connections.values) }
    }

    // MARK: Switches

    var profile: FaultProfile {
        state.withLock { $0.profile }
    }

    /// Stores `profile` for new connections and returns the live ones, atomically.
    func setProfile(_ profile: FaultProfile) -> [ConnectionHandle] {
        state.withLock { state in
            state.profile = profile
            return Array(state.connections.values)
        }
    }

    func setBlackholeNew(_ on: Bool) {
        state.withLock { $0.blackholeNew = on }
    }

    func setRefuseNew(_ on: Bool) {
        state.withLock { $0.refuseNew = on }
    }

    /// Marks every connection admitted so far as blackholed and returns them.
    func markAllBlackholed() -> [ConnectionHandle] {
        state.withLock { state in
            blackholedBelow.store(state.nextNumber, ordering: .releasing)
            return Array(state.connections.values)
        }
    }

    /// Marks every connection admitted so far as cut and returns them.
    func markAllCut() -> [ConnectionHandle] {
        state.withLock { state in
            cutBelow.store(state.nextNumber, ordering: .releasing)
            return Array(state.connections.values)
        }
    }

    /// Turns the hold of every connection on or off and returns the live ones, atomically
    /// (a connection admitted later reads the switch itself).
    func setHeld(_ on: Bool) -> [ConnectionHandle] {
        state.withLock { state in
            held.store(on, ordering: .releasing)
            return Array(state.connections.values)
        }
    }

    /// Refuses every later connection and returns the live ones.
    func beginStop() -> [ConnectionHandle] {
        state.withLock { state in
            state.stopped = true
            return Array(state.connections.values)
        }
    }

    // MARK: Statistics

    var statistics: FaultProxy.Statistics {
        state.withLock { $0.statistics }
    }

    /// Changes the statistics and tells the watchers.
    func updateStatistics(_ body: (inout FaultProxy.Statistics) -> Void) {
        state.withLock { state in
            body(&state.statistics)
            Self.notify(&state)
        }
    }

    /// A stream of the statistics: the current ones first, then after every change (the
    /// newest only, if the reader is slower); it finishes when the proxy has stopped.
    func statisticsUpdates() -> AsyncStream<FaultProxy.Statistics> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: FaultProxy.Statistics.self,
            bufferingPolicy: .bufferingNewest(1)
        )
        let id: Int? = state.withLock { state in
            continuation.yield(state.statistics)
            guard !state.stopped || !state.connections.isEmpty else { return nil }
            let id = state.nextWatcher
            state.nextWatcher += 1
            state.watchers[id] = continuation
            return id
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.watchers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Finishes every statistics stream (after ``FaultProxy/stop()``).
    func finishWatchers() {
        let watchers = state.withLock { state in
            let watchers = state.watchers
            state.watchers = [:]
            return watchers
        }
        for continuation in watchers.values { continuation.finish() }
    }

    /// Yields the statistics to every watcher; called with the lock held so that watchers
    /// see the changes in order.
    private static func notify(_ state: inout State) {
        for continuation in state.watchers.values { continuation.yield(state.statistics) }
    }
}
