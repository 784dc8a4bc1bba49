/// When to send a HEARTBEAT and when the connection is dead: seed 003's adaptive heartbeat
/// with seed 000's RTT-based ACK timeout and app modes. Pure: time is passed in, the driver
/// does the I/O.
///
/// **Interval.** A heartbeat is due when nothing was sent for ``interval`` or nothing was
/// received for ``interval``, whichever comes first, and no heartbeat is outstanding. In the
/// background (and in the foreground without a fixed
/// ``Configuration/foregroundInterval``) the interval adapts (seed 003): it starts at 50% of
/// `maxInterval`, grows by ``step`` (10% of `maxInterval`) with every answered heartbeat and
/// shrinks by 3 steps with every unanswered one, always within [`minInterval`,
/// `maxInterval`]. The learned interval survives reconnects and mode changes: it belongs to
/// the network, not to one connection.
///
/// **Failures.** A heartbeat whose ACK has not arrived before ``ackTimeout`` passed is a
/// failure; an ACK at or after the deadline is too late and counts as that failure too.
/// After a failure the next heartbeat is due **at once** (a retry: consecutive failures
/// probe the same silence, and the shortened interval applies to later idle periods and the
/// next connection). `failuresUntilDead` consecutive failures make ``nextAction(now:)``
/// return ``Action/dead`` until ``connectionStarted(now:)``; one answered heartbeat clears
/// the count (seed 003: one success confirms, only several failures deny).
///
/// **ACK timeout.** `rttFactor` × the smoothed RTT, clamped to [`minAckTimeout`,
/// `maxAckTimeout`]; `maxAckTimeout` until the first RTT sample.
///
/// ```swift
/// var heartbeat = AdaptiveHeartbeat(configuration: config, now: clock.now)
/// // on every frame written / read: heartbeat.frameSent(at:) / frameReceived(at:)
/// switch heartbeat.nextAction(now: clock.now) {
/// case .sendHeartbeat: write(.heartbeat, sequence: s); heartbeat.heartbeatSent(sequence: s, at: clock.now)
/// case .wait(let deadline): sleep(until: deadline) // or until the next event
/// case .dead: reconnect()
/// }
/// ```
public struct AdaptiveHeartbeat: Sendable, Hashable {
    /// The heartbeat's bounds and timeouts.
    public struct Configuration: Sendable, Hashable {
        /// The shortest interval. Default 5 s.
        public var minInterval: Duration
        /// The longest interval. Default 30 s. The client lowers it to the interval the
        /// gateway announces in LOGIN_OK.
        public var maxInterval: Duration
        /// `nil` (default): the foreground interval adapts like the background one. Set: the
        /// fixed interval in the foreground (clamped to [`minInterval`, `maxInterval`]);
        /// answered and unanswered heartbeats do not change it, but failures still count
        /// toward `failuresUntilDead`.
        public var foregroundInterval: Duration?
        /// Consecutive unanswered heartbeats that make the connection dead. Default 3.
        public var failuresUntilDead: Int
        /// The shortest ACK timeout. Default 2 s.
        public var minAckTimeout: Duration
        /// The longest ACK timeout, and the timeout before any RTT is known. Default 10 s.
        public var maxAckTimeout: Duration
        /// ACK timeout = `rttFactor` × smoothed RTT (clamped). Default 4.
        public var rttFactor: Double

        /// Creates a configuration; every value has a default.
        public init(
            minInterval: Duration = .seconds(5),
            maxInterval: Duration = .seconds(30),
            foregroundInterval: Duration? = nil,
            failuresUntilDead: Int = 3,
            minAckTimeout: Duration = .seconds(2),
            maxAckTimeout: Duration = .seconds(10),
            rttFactor: Double = 4
        ) {
            self.minInterval = minInterval
            self.maxInterval = maxInterval
            self.foregroundInterval = foregroundInterval
            self.failuresUntilDead = failuresUntilDead
            self.minAckTimeout = minAckTimeout
            self.maxAckTimeout = maxAckTimeout
            self.rttFactor = rttFactor
        }

        /// Checks what the heartbeat relies on.
        fileprivate func validate() {
            precondition(minInterval > .zero, "minInterval must be positive")
            precondition(minInterval <= maxInterval, "minInterval must not exceed maxInterval")
            precondition(failuresUntilDead >= 1, "failuresUntilDead must be at least 1")
            precondition(minAckTimeout > .zero, "minAckTimeout must be positive")
            precondition(minAckTimeout <= maxAckTimeout, "minAckTimeout must not exceed maxAckTimeout")
            precondition(rttFactor > 0 && rttFactor.isFinite, "rttFactor must be a positive number")
        }

        /// `duration` within [`minInterval`, `maxInterval`].
        fileprivate func clampInterval(_ duration: Duration) -> Duration {
            min(max(duration, minInterval), maxInterval)
        }
    }

    /// Whether the app is in use.
    public enum Mode: Sendable, Hashable {
        /// In use: the fixed ``Configuration/foregroundInterval`` if set, adaptive otherwise.
        case foreground
        /// Not in use: adaptive.
        case background
    }

    /// What the driver does now.
    public enum Action: Sendable, Hashable {
        /// Send a HEARTBEAT now and call ``AdaptiveHeartbeat/heartbeatSent(sequence:at:)``.
        case sendHeartbeat
        /// Nothing to do until this instant (or until the next event).
        case wait(until: ContinuousClock.Instant)
        /// `failuresUntilDead` consecutive heartbeats went unanswered: reconnect.
        case dead
    }

    /// The bounds and timeouts. Change them with ``reconfigure(_:)``.
    public private(set) var configuration: Configuration
    /// The app mode (``setMode(_:now:)``).
    public private(set) var mode: Mode
    /// Consecutive unanswered heartbeats since the last answered one (or the connection's start).
    public private(set) var consecutiveFailures: Int
    /// The smoothed heartbeat round trip (7/8 old + 1/8 sample); `nil` before the first ACK.
    /// Kept across reconnects, like the adaptive interval.
    public private(set) var smoothedRTT: Duration?

    /// The interval learned by the adaptive algorithm (used in the background, and in the
    /// foreground unless it is fixed).
    public private(set) var adaptiveInterval: Duration

    private var lastSent: ContinuousClock.Instant
    private var lastReceived: ContinuousClock.Instant
    /// A heartbeat waiting for its ACK.
    private struct Outstanding: Sendable, Hashable {
        var sequence: UInt32
        var sentAt: ContinuousClock.Instant
        /// A check after a network change (``probeSent(sequence:at:)``): unanswered, the
        /// connection is dead at once.
        var isProbe = false
    }

    /// The heartbeat waiting for its ACK.
    private var outstanding: Outstanding?
    /// A heartbeat is due at this instant regardless of the idle timers (a retry after a
    /// failure, or the switch to the foreground).
    private var dueNow: ContinuousClock.Instant?
    /// Whether `failuresUntilDead` consecutive heartbeats failed (until ``connectionStarted(now:)``).
    public private(set) var isDead = false

    /// Starts in `mode`, with the idle timers running from `now`.
    public init(configuration: Configuration = .init(), mode: Mode = .foreground, now: ContinuousClock.Instant) {
        configuration.validate()
        self.configuration = configuration
        self.mode = mode
        self.consecutiveFailures = 0
        self.smoothedRTT = nil
        self.adaptiveInterval = configuration.clampInterval(configuration.maxInterval / 2)
        self.lastSent = now
        self.lastReceived = now
    }

    /// Whether the interval is fixed (foreground with a ``Configuration/foregroundInterval``).
    public var isFixed: Bool {
        mode == .foreground && configuration.foregroundInterval != nil
    }

    /// The current interval: the fixed foreground interval, or the adaptive one.
    public var interval: Duration {
        if mode == .foreground, let fixed = configuration.foregroundInterval {
            return configuration.clampInterval(fixed)
        }
        return adaptiveInterval
    }

    /// How much the adaptive interval grows per answered heartbeat: 10% of `maxInterval`
    /// (it shrinks by three steps per unanswered one).
    public var step: Duration { configuration.maxInterval * 0.1 }

    /// How long a heartbeat waits for its ACK: `rttFactor` × ``smoothedRTT`` clamped to
    /// [`minAckTimeout`, `maxAckTimeout`]; `maxAckTimeout` before any RTT is known.
    public var ackTimeout: Duration {
        guard let smoothedRTT else { return configuration.maxAckTimeout }
        let scaled = smoothedRTT * configuration.rttFactor
        return min(max(scaled, configuration.minAckTimeout), configuration.maxAckTimeout)
    }

    /// The longest time from the link going silent (nothing sent arrives, nothing arrives)
    /// until ``nextAction(now:)`` returns ``Action/dead``, with the current state and a
    /// driver that acts at the instants ``Action/wait(until:)`` names:
    /// ``interval`` + `failuresUntilDead` × ``ackTimeout``.
    ///
    /// The first heartbeat is due at most one interval after the silence began; then each of
    /// `failuresUntilDead` heartbeats waits one ACK timeout, and retries go out at once, so
    /// the intervals shrinking on failures do not add to the bound. A heartbeat already
    /// outstanding or failures already counted only make detection faster. A mode change
    /// during the silence changes the interval and so the bound.
    public var detectionBound: Duration {
        interval + ackTimeout * configuration.failuresUntilDead
    }

    /// Whether a heartbeat is waiting for its ACK.
    public var isHeartbeatOutstanding: Bool { outstanding != nil }

    /// Switches the app mode. Entering the foreground from the background makes a heartbeat
    /// due at once (seed 000: check the connection when the user comes back); entering the
    /// background switches to the adaptive interval.
    public mutating func setMode(_ mode: Mode, now: ContinuousClock.Instant) {
        settleOverdue(now: now)
        guard mode != self.mode else { return }
        self.mode = mode
        if mode == .foreground, outstanding == nil, !isDead {
            dueNow = min(dueNow ?? now, now)
        }
    }

    /// Replaces the configuration (e.g. `maxInterval` lowered to the interval LOGIN_OK
    /// announced), keeping what was learned: the adaptive interval (clamped to the new
    /// bounds), the smoothed RTT, the failure count and the timers.
    public mutating func reconfigure(_ configuration: Configuration) {
        configuration.validate()
        self.configuration = configuration
        self.adaptiveInterval = configuration.clampInterval(adaptiveInterval)
    }

    /// A new connection: failures cleared, an outstanding heartbeat forgotten, not dead, the
    /// idle timers restarted from `now`. The adaptive interval and the smoothed RTT are kept:
    /// they were learned for this network.
    public mutating func connectionStarted(now: ContinuousClock.Instant) {
        consecutiveFailures = 0
        outstanding = nil
        dueNow = nil
        isDead = false
        lastSent = now
        lastReceived = now
    }

    /// A frame was written (any frame, heartbeats included).
    public mutating func frameSent(at now: ContinuousClock.Instant) {
        lastSent = max(lastSent, now)
    }

    /// A frame was read (any frame, ACKs included). Only the ACK of the outstanding heartbeat
    /// (``ackReceived(sequence:at:)``) counts as an answer.
    public mutating func frameReceived(at now: ContinuousClock.Instant) {
        lastReceived = max(lastReceived, now)
    }

    /// The HEARTBEAT with `sequence` was written at `now`; its ACK is due before
    /// `now + ackTimeout`. Ignored once dead.
    public mutating func heartbeatSent(sequence: UInt32, at now: ContinuousClock.Instant) {
        settleOverdue(now: now)
        guard !isDead else { return }
        outstanding = Outstanding(sequence: sequence, sentAt: now)
        dueNow = nil
        frameSent(at: now)
    }

    /// A HEARTBEAT sent to check the connection now that the network came back
    /// (``IMClient/networkAvailable()``): like ``heartbeatSent(sequence:at:)``, but if its ACK
    /// does not arrive within ``ackTimeout`` the connection is dead at once, without the
    /// retries of an ordinary heartbeat: after a network change a silent connection is
    /// almost always gone, and waiting for `failuresUntilDead` timeouts would keep the user
    /// offline for that long. Ignored once dead.
    public mutating func probeSent(sequence: UInt32, at now: ContinuousClock.Instant) {
        heartbeatSent(sequence: sequence, at: now)
        outstanding?.isProbe = true
    }

    /// Makes the heartbeat already waiting for its ACK decisive, like a probe, keeping its
    /// deadline: it is already testing the path, and a new heartbeat would restart the wait.
    /// Returns false (and changes nothing) when none is outstanding.
    public mutating func makeOutstandingDecisive(now: ContinuousClock.Instant) -> Bool {
        settleOverdue(now: now)
        guard !isDead, outstanding != nil else { return false }
        outstanding?.isProbe = true
        return true
    }

    /// A round trip measured outside the heartbeat (e.g. connect + LOGIN → LOGIN_OK), used
    /// only while no heartbeat has measured one, so that ``ackTimeout`` is not
    /// `maxAckTimeout` on a connection too busy to have sent a heartbeat yet.
    public mutating func roundTripMeasured(_ sample: Duration) {
        guard smoothedRTT == nil, sample > .zero else { return }
        smoothedRTT = sample
    }

    /// An ACK with `sequence` arrived at `now`. If it answers the outstanding heartbeat in
    /// time: an RTT sample (smoothed 7/8 old + 1/8 new), the failure count cleared and the
    /// adaptive interval one ``step`` longer (unless fixed). Other sequences, and an ACK at
    /// or after the heartbeat's deadline (already a failure), change nothing else.
    public mutating func ackReceived(sequence: UInt32, at now: ContinuousClock.Instant) {
        frameReceived(at: now)
        settleOverdue(now: now)
        guard let outstanding, outstanding.sequence == sequence else { return }
        self.outstanding = nil
        let sample = max(now - outstanding.sentAt, .zero)
        smoothedRTT = smoothedRTT.map { $0 * (7.0 / 8.0) + sample * (1.0 / 8.0) } ?? sample
        consecutiveFailures = 0
        if !isFixed {
            adaptiveInterval = configuration.clampInterval(adaptiveInterval + step)
        }
    }

    /// What to do at `now`. Safe to call any number of times: calling it again at the same
    /// instant returns the same action and counts no failure twice.
    public mutating func nextAction(now: ContinuousClock.Instant) -> Action {
        settleOverdue(now: now)
        if isDead { return .dead }
        if let outstanding {
            return .wait(until: outstanding.sentAt + ackTimeout)
        }
        let due = nextHeartbeatDue
        return now >= due ? .sendHeartbeat : .wait(until: due)
    }

    /// When the next heartbeat is due if nothing else happens (ignoring an outstanding one).
    private var nextHeartbeatDue: ContinuousClock.Instant {
        let idle = min(lastSent, lastReceived) + interval
        return dueNow.map { min($0, idle) } ?? idle
    }

    /// Counts the outstanding heartbeat as failed if its deadline passed by `now`.
    private mutating func settleOverdue(now: ContinuousClock.Instant) {
        guard !isDead, let outstanding, now >= outstanding.sentAt + ackTimeout else { return }
        let failedAt = outstanding.sentAt + ackTimeout
        self.outstanding = nil
        consecutiveFailures += 1
        if !isFixed {
            adaptiveInterval = configuration.clampInterval(adaptiveInterval - step * 3)
        }
        if consecutiveFailures >= configuration.failuresUntilDead || outstanding.isProbe {
            isDead = true
            dueNow = nil
        } else {
            // Retry at once.
            dueNow = failedAt
        }
    }
}
