/// When to refresh the session's token (PROTOCOL.md 6.1.1 and 10). Pure: time is passed in,
/// the client fetches tokens and sends TOKEN_REFRESH.
///
/// **Clock.** TOKEN_EXPIRY is a Unix time of the token issuer and gateway, not of the
/// device, whose clock may be wrong. The schedule anchors the gateway's clock at LOGIN_OK
/// (its SERVER_TIME at the instant LOGIN_OK arrived) and turns every expiry into an instant
/// of the monotonic clock from there; a refresh ACK carrying SERVER_TIME re-anchors it.
///
/// **Rule.** With lifetime L from the grant (LOGIN_OK or the last positive refresh ACK) to the
/// expiry, the refresh is due at grant + min(`lifetimeFraction` × L, L − `margin`), and at
/// once when that is not after the grant (a token that is about to expire, or already has).
/// Defaults: 80% of the lifetime or 60 s before the expiry, whichever comes first.
///
/// **Failures.** A refusal or an unanswered refresh is retried after `retryBackoff`'s delay
/// for the number of failures so far, as long as the retry comes before the expiry; after
/// that nothing more is tried on this connection (the gateway ends the session with KICK
/// TOKEN_EXPIRED, and the client logs in again with a new token).
///
/// ```swift
/// var schedule = TokenRefreshSchedule()
/// schedule.loggedIn(serverTime: ok.serverTime, tokenExpiry: ok.tokenExpiry, now: clock.now)
/// switch schedule.nextAction(now: clock.now) {
/// case .refresh: schedule.refreshStarted(); send(TokenRefresh(token: try await provider()))
/// case .wait(let until): sleep(until: until)  // or until the next event
/// case .none: break
/// }
/// // positive ACK: schedule.refreshed(tokenExpiry: ack.tokenExpiry, serverTime: ack.serverTime, now: clock.now)
/// // refusal or timeout: schedule.refreshFailed(now: clock.now, using: &generator)
/// ```
public struct TokenRefreshSchedule: Sendable, Hashable {
    /// The rule's parameters.
    public struct Configuration: Sendable, Hashable {
        /// Refresh once this share of the token's lifetime has passed. Default 0.8.
        public var lifetimeFraction: Double
        /// Refresh at the latest this long before the token expires. Default 60 s.
        public var margin: Duration
        /// Delays between failed attempts (attempt n waits in its level n). Default 1 s
        /// doubling to at most 32 s.
        public var retryBackoff: ReconnectBackoff

        /// Creates a configuration; every value has a default.
        public init(
            lifetimeFraction: Double = 0.8,
            margin: Duration = .seconds(60),
            retryBackoff: ReconnectBackoff = ReconnectBackoff(base: .seconds(1), cap: .seconds(32))
        ) {
            precondition(lifetimeFraction >= 0 && lifetimeFraction <= 1, "lifetimeFraction must be in 0...1")
            precondition(margin >= .zero, "margin must not be negative")
            self.lifetimeFraction = lifetimeFraction
            self.margin = margin
            self.retryBackoff = retryBackoff
        }
    }

    /// What to do now.
    public enum Action: Sendable, Hashable {
        /// Refresh now.
        case refresh
        /// Nothing until this instant (then ask again).
        case wait(until: ContinuousClock.Instant)
        /// Nothing to plan: no expiry known, a refresh under way, or no time left to retry.
        case none
    }

    private enum State: Sendable, Hashable {
        /// No expiry known, or the connection is down.
        case idle
        /// The next attempt is due at this instant.
        case scheduled(ContinuousClock.Instant)
        /// A refresh was started and has not been answered.
        case refreshing
        /// The retries ran into the expiry.
        case exhausted
    }

    /// The gateway's clock: its Unix milliseconds at a monotonic instant.
    private struct Anchor: Sendable, Hashable {
        var serverTime: UInt64
        var instant: ContinuousClock.Instant
    }

    /// The rule's parameters.
    public let configuration: Configuration
    /// When the current token expires, on the monotonic clock; `nil` if unknown.
    public private(set) var expiresAt: ContinuousClock.Instant?
    /// When the current token's refresh is due by the rule (retries aside); `nil` if unknown.
    public private(set) var refreshPoint: ContinuousClock.Instant?
    /// Failed attempts since the last grant.
    public private(set) var failures = 0
    private var state = State.idle
    private var anchor: Anchor?

    /// A schedule with nothing known yet.
    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    /// LOGIN_OK arrived at `now`: the gateway's clock reads `serverTime` (Unix milliseconds;
    /// pass the device's clock when LOGIN_OK has no SERVER_TIME), and the token expires at
    /// `tokenExpiry` (`nil`: unknown, nothing is planned).
    public mutating func loggedIn(serverTime: UInt64, tokenExpiry: UInt64?, now: ContinuousClock.Instant) {
        anchor = Anchor(serverTime: serverTime, instant: now)
        granted(tokenExpiry: tokenExpiry, now: now)
    }

    /// A refresh was ACKed at `now`: the new token expires at `tokenExpiry`; `serverTime`, if
    /// the ACK carried SERVER_TIME, re-anchors the gateway's clock.
    public mutating func refreshed(tokenExpiry: UInt64?, serverTime: UInt64? = nil, now: ContinuousClock.Instant) {
        if let serverTime { anchor = Anchor(serverTime: serverTime, instant: now) }
        granted(tokenExpiry: tokenExpiry, now: now)
    }

    /// A refresh is under way (its token being fetched or its ACK awaited): nothing is due
    /// until ``refreshed(tokenExpiry:serverTime:now:)`` or ``refreshFailed(now:using:)``.
    public mutating func refreshStarted() {
        state = .refreshing
    }

    /// The refresh failed at `now` (no token, refused, no ACK): the next attempt is due after
    /// the retry delay if that is before the expiry, otherwise none is.
    public mutating func refreshFailed(now: ContinuousClock.Instant, using generator: inout some RandomNumberGenerator) {
        let delay = configuration.retryBackoff.delay(attempt: failures, using: &generator)
        failures += 1
        let retry = now + delay
        if let expiresAt, retry >= expiresAt {
            state = .exhausted
        } else {
            state = .scheduled(retry)
        }
    }

    /// The connection is gone: nothing is due until the next LOGIN_OK. The token's expiry is
    /// kept (``isRefreshDue(now:)`` tells whether the next LOGIN wants a new token).
    public mutating func connectionLost() {
        state = .idle
        failures = 0
    }

    /// What to do at `now`.
    public func nextAction(now: ContinuousClock.Instant) -> Action {
        guard case .scheduled(let due) = state else { return .none }
        return due <= now ? .refresh : .wait(until: due)
    }

    /// Whether the current token has reached its refresh point at `now` (or expired): a
    /// LOGIN at `now` should rather use a new token.
    public func isRefreshDue(now: ContinuousClock.Instant) -> Bool {
        guard let refreshPoint else { return false }
        return refreshPoint <= now
    }

    /// The instant the rule gives for a token granted at `grantedAt` that expires at
    /// `expiresAt`: 80% of the lifetime or 60 s before the expiry (by default), whichever
    /// comes first, and never before the grant.
    public static func refreshPoint(
        grantedAt: ContinuousClock.Instant, expiresAt: ContinuousClock.Instant, configuration: Configuration
    ) -> ContinuousClock.Instant {
        let lifetime = expiresAt - grantedAt
        guard lifetime > .zero else { return grantedAt }
        let wait = min(Self.share(configuration.lifetimeFraction, of: lifetime), lifetime - configuration.margin)
        return grantedAt + max(.zero, wait)
    }

    /// `fraction` of `duration`, to the millisecond (expiries are milliseconds anyway).
    private static func share(_ fraction: Double, of duration: Duration) -> Duration {
        let (seconds, attoseconds) = duration.components
        let milliseconds = Double(seconds) * 1000 + Double(attoseconds / 1_000_000_000_000_000)
        return .milliseconds(Int64((milliseconds * fraction).rounded()))
    }

    /// A token expiring at `tokenExpiry` is in use from `now`.
    private mutating func granted(tokenExpiry: UInt64?, now: ContinuousClock.Instant) {
        failures = 0
        guard let tokenExpiry, let anchor else {
            expiresAt = nil
            refreshPoint = nil
            state = .idle
            return
        }
        let expiry = anchor.instant + Self.duration(from: anchor.serverTime, to: tokenExpiry)
        let point = Self.refreshPoint(grantedAt: now, expiresAt: expiry, configuration: configuration)
        expiresAt = expiry
        refreshPoint = point
        state = .scheduled(point)
    }

    /// The gateway's clock goes from `start` to `end` (Unix milliseconds) in this much time,
    /// clamped to ±100 years so that absurd values cannot overflow the clock's arithmetic.
    static func duration(from start: UInt64, to end: UInt64) -> Duration {
        let limit: UInt64 = 100 * 366 * 86_400_000
        let milliseconds = end >= start ? Int64(min(end - start, limit)) : -Int64(min(start - end, limit))
        return .milliseconds(milliseconds)
    }
}
