/// Who shares their location with whom, and until when (LOCATION_SHARE_START / STOP).
///
/// A share lasts its duration, shortened to ``maxDuration``, or until stopped; a new start
/// replaces the running share (audience and duration). A watcher may see a sharer's positions
/// only while a running share names it in the audience (docs/PROTOCOL.md 6.7). Time is
/// injected as seconds; expired shares are ignored at once and removed by ``purge(now:)``.
public struct LocationShares: Sendable, Hashable {
    /// One running share.
    public struct Share: Sendable, Hashable {
        /// The users who may watch.
        public var audience: Set<String>
        /// When it ends, in the injected clock's seconds.
        public var expiresAt: Double

        /// Seconds left at `now` (0 once ended): the message expiry of the retained position.
        public func remaining(now: Double) -> Double { max(0, self.expiresAt - now) }
    }

    /// The longest share in seconds.
    public let maxDuration: Double

    private var shares: [String: Share] = [:]

    /// Creates an empty registry; shares last at most `maxDuration` seconds (default a day).
    public init(maxDuration: Double = 86400) {
        precondition(maxDuration > 0, "shares must be able to last")
        self.maxDuration = maxDuration
    }

    /// Starts (or replaces) `sharer`'s share with `audience` for `duration` seconds, clamped to
    /// 0...``maxDuration``. Returns the share as stored.
    @discardableResult
    public mutating func start(sharer: String, audience: Set<String>, duration: Double, now: Double) -> Share {
        let share = Share(audience: audience, expiresAt: now + min(max(duration, 0), self.maxDuration))
        self.shares[sharer] = share
        return share
    }

    /// Ends `sharer`'s share; returns it if one was stored (even if already expired).
    @discardableResult
    public mutating func stop(sharer: String) -> Share? {
        self.shares.removeValue(forKey: sharer)
    }

    /// `sharer`'s running share at `now`, if any.
    public func share(of sharer: String, now: Double) -> Share? {
        guard let share = self.shares[sharer], now < share.expiresAt else { return nil }
        return share
    }

    /// Whether `watcher` may see `sharer`'s positions at `now`.
    public func canWatch(watcher: String, sharer: String, now: Double) -> Bool {
        self.share(of: sharer, now: now)?.audience.contains(watcher) ?? false
    }

    /// The audience of `sharer`'s running share at `now`; empty without one.
    public func audience(of sharer: String, now: Double) -> Set<String> {
        self.share(of: sharer, now: now)?.audience ?? []
    }

    /// Removes shares that ended by `now` and returns their sharers, sorted (e.g. to clear
    /// their retained positions).
    @discardableResult
    public mutating func purge(now: Double) -> [String] {
        let ended = self.shares.filter { now >= $0.value.expiresAt }.keys.sorted()
        for sharer in ended { self.shares[sharer] = nil }
        return ended
    }

    /// Shares stored, including expired ones not yet purged.
    public var count: Int { self.shares.count }
}
