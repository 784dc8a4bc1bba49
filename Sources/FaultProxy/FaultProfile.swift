/// The faults a ``FaultProxy`` injects into each connection: latency, bandwidth, stalls and
/// cuts. Blackholing and refusing are switched by the proxy's methods instead, because tests
/// decide when they happen.
///
/// ```swift
/// let proxy = try await FaultProxy.start(upstreamPort: gatewayPort, profile: .weak(), seed: 42)
/// proxy.setProfile(.none)   // a good network again, for every connection
/// ```
///
/// Every field applies per connection and, where it makes sense, per direction. A value
/// that makes no sense (a negative rate, a bandwidth of zero or less) is treated as "no such
/// fault" rather than trapping, because the fields are plain `var`s.
public struct FaultProfile: Sendable, Hashable {
    /// The one-way delay of each chunk (one read from a socket), drawn uniformly from this
    /// range for every chunk; `nil` for none.
    ///
    /// Order is preserved per direction: a chunk is delivered at
    /// `max(delivery time of the previous chunk, arrival + latency)`, so a chunk never
    /// overtakes the one before it (as on one TCP connection). A close (FIN) travels behind
    /// the data with a latency of its own.
    public var latency: ClosedRange<Duration>?

    /// The mean rate, per minute and per connection, of stalls (a Poisson process): both
    /// directions stop forwarding for a duration drawn from ``stallDuration``, then resume
    /// with everything that arrived meanwhile delivered intact and in order. 0 for none.
    public var stallsPerMinute: Double

    /// How long one stall lasts, drawn uniformly from this range.
    public var stallDuration: ClosedRange<Duration>

    /// The mean rate, per minute and per connection, of cuts (a Poisson process): both
    /// sides are closed abruptly (`SO_LINGER` 0, so the peers see a reset) and data in
    /// flight is lost. 0 for none.
    public var cutsPerMinute: Double

    /// A limit in bytes per second for each direction of each connection; `nil` for none.
    /// A chunk leaves the proxy once the link has carried it (bytes / bandwidth after the
    /// previous chunk), then travels with its ``latency``.
    public var bandwidth: Int?

    /// Forwards everything at once: no latency, stalls, cuts or bandwidth limit.
    public static let none = FaultProfile()

    /// A weak mobile network: by default latency 200...800 ms per chunk, a stall of 1 to 5 s
    /// twice a minute and a cut every two minutes per connection, no bandwidth limit.
    ///
    /// - Parameters:
    ///   - latency: The one-way delay range of each chunk.
    ///   - stallsPerMinute: The mean rate of stalls per connection.
    ///   - stallDuration: How long one stall lasts.
    ///   - cutsPerMinute: The mean rate of cuts per connection.
    ///   - bandwidth: A limit in bytes per second per direction, or `nil`.
    public static func weak(
        latency: ClosedRange<Duration> = .milliseconds(200) ... .milliseconds(800),
        stallsPerMinute: Double = 2,
        stallDuration: ClosedRange<Duration> = .seconds(1) ... .seconds(5),
        cutsPerMinute: Double = 0.5,
        bandwidth: Int? = nil
    ) -> FaultProfile {
        FaultProfile(
            latency: latency,
            stallsPerMinute: stallsPerMinute,
            stallDuration: stallDuration,
            cutsPerMinute: cutsPerMinute,
            bandwidth: bandwidth
        )
    }

    /// A profile with the given faults; the defaults inject none.
    ///
    /// - Parameters:
    ///   - latency: The one-way delay range of each chunk, or `nil` for none.
    ///   - stallsPerMinute: The mean rate of stalls per connection (0: none).
    ///   - stallDuration: How long one stall lasts (default 1...5 s).
    ///   - cutsPerMinute: The mean rate of cuts per connection (0: none).
    ///   - bandwidth: A limit in bytes per second per direction, or `nil` for none.
    public init(
        latency: ClosedRange<Duration>? = nil,
        stallsPerMinute: Double = 0,
        stallDuration: ClosedRange<Duration> = .seconds(1) ... .seconds(5),
        cutsPerMinute: Double = 0,
        bandwidth: Int? = nil
    ) {
        self.latency = latency
        self.stallsPerMinute = stallsPerMinute
        self.stallDuration = stallDuration
        self.cutsPerMinute = cutsPerMinute
        self.bandwidth = bandwidth
    }
}

extension FaultProfile {
    /// ``bandwidth`` if it is a usable limit.
    var effectiveBandwidth: Int? {
        guard let bandwidth, bandwidth > 0 else { return nil }
        return bandwidth
    }

    /// ``stallsPerMinute`` if it is a usable rate.
    var effectiveStallRate: Double? { Self.usableRate(stallsPerMinute) }

    /// ``cutsPerMinute`` if it is a usable rate.
    var effectiveCutRate: Double? { Self.usableRate(cutsPerMinute) }

    private static func usableRate(_ rate: Double) -> Double? {
        rate.isFinite && rate > 0 ? rate : nil
    }
}
