extension FaultProxy {
    /// Counters since the proxy started. Bytes are counted when the proxy writes them to the
    /// other side, so data lost to a cut or a blackhole is in ``bytesDiscarded`` instead.
    public struct Statistics: Sendable, Hashable {
        /// Connections accepted and forwarded (or accepted blackholed); refused ones are not
        /// counted here.
        public var connectionsAccepted = 0
        /// Connections closed at once because of ``FaultProxy/refuseNew(_:)``.
        public var connectionsRefused = 0
        /// Accepted connections not yet closed on both sides.
        public var connectionsOpen = 0
        /// Accepted connections whose connection to the upstream failed (the client's side
        /// was then closed).
        public var upstreamConnectFailures = 0
        /// Bytes written to the upstream (client to server).
        public var bytesUpstream = 0
        /// Bytes written to the clients (server to client).
        public var bytesDownstream = 0
        /// Bytes read and thrown away: by a blackhole, or queued when a cut, a blackhole or
        /// a closed receiver dropped them.
        public var bytesDiscarded = 0
        /// Stalls begun.
        public var stalls = 0
        /// Connections cut: by ``FaultProfile/cutsPerMinute`` or ``FaultProxy/cutAll()``.
        public var cuts = 0
        /// Connections blackholed: by ``FaultProxy/blackholeAll()`` or accepted under
        /// ``FaultProxy/blackholeNew(_:)``.
        public var blackholed = 0

        /// All counters zero.
        public init() {}
    }
}

/// What can go wrong in the proxy's own API.
public enum FaultProxyError: Error, Sendable, Hashable {
    /// ``FaultProxy/waitForStatistics(timeout:until:)`` saw no matching statistics in
    /// time; the last statistics seen.
    case timedOut(FaultProxy.Statistics)
    /// The listening socket was bound but has no port (not a TCP address); the address.
    case noListeningPort(String)
    /// ``FaultProxy/start(upstreams:listenHost:listenPort:profile:seed:group:)`` was given no upstream.
    case noUpstream
}
