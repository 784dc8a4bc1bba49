import Testing

@testable import IMClient

@Suite("AdaptiveHeartbeat: interval, failures, RTT and app modes on an injected clock")
struct AdaptiveHeartbeatTests {
    typealias Instant = ContinuousClock.Instant

    let t0 = ContinuousClock.now

    /// Seed 003's example with round numbers: max 60 s, so start 30, step 6.
    static let seedExample = AdaptiveHeartbeat.Configuration(
        minInterval: .seconds(6), maxInterval: .seconds(60), failuresUntilDead: 3)

    /// Sends the next heartbeat at the instant it is due and answers it after `rtt`, or
    /// lets it time out (and has the failure counted). Returns the instant the exchange ended.
    @discardableResult
    func cycle(
        _ heartbeat: inout AdaptiveHeartbeat,
        sequence: UInt32,
        answered: Bool,
        rtt: Duration = .milliseconds(100)
    ) -> Instant {
        // Asked at an instant long past, the heartbeat names when the next one is due.
        guard case .wait(let due) = heartbeat.nextAction(now: t0 - .seconds(1_000_000)) else {
            Issue.record("no heartbeat to wait for")
            return t0
        }
        #expect(heartbeat.nextAction(now: due) == .sendHeartbeat)
        heartbeat.heartbeatSent(sequence: sequence, at: due)
        if answered {
            heartbeat.ackReceived(sequence: sequence, at: due + rtt)
            return due + rtt
        }
        let deadline = due + heartbeat.ackTimeout
        #expect(heartbeat.nextAction(now: deadline - .milliseconds(1)) == .wait(until: deadline))
        _ = heartbeat.nextAction(now: deadline)
        return deadline
    }

    @Test("starts at 50% of the maximum, with a step of 10% of it and the longest ACK timeout")
    func initialState() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        #expect(heartbeat.interval == .seconds(30))
        #expect(heartbeat.step == .seconds(6))
        #expect(heartbeat.ackTimeout == .seconds(10))
        #expect(heartbeat.smoothedRTT == nil)
        #expect(heartbeat.consecutiveFailures == 0)
        #expect(heartbeat.nextAction(now: t0) == .wait(until: t0 + .seconds(30)))
        #expect(heartbeat.nextAction(now: t0 + .seconds(29)) == .wait(until: t0 + .seconds(30)))
        #expect(heartbeat.nextAction(now: t0 + .seconds(30)) == .sendHeartbeat)

        let defaults = AdaptiveHeartbeat(now: t0)
        #expect(defaults.interval == .seconds(15))
        #expect(defaults.step == .seconds(3))
        #expect(defaults.mode == .foreground)
        #expect(defaults.detectionBound == .seconds(15 + 3 * 10))
    }

    @Test("seed 003's example: start 30, one success 36, one failure 12")
    func seedExample() {
        var succeeded = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        cycle(&succeeded, sequence: 1, answered: true)
        #expect(succeeded.interval == .seconds(36))
        #expect(succeeded.consecutiveFailures == 0)

        var failed = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        cycle(&failed, sequence: 1, answered: false)
        #expect(failed.interval == .seconds(12))
        #expect(failed.consecutiveFailures == 1)
    }

    @Test("every answered heartbeat adds 10% of the maximum, up to the maximum")
    func growsToMax() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        var intervals: [Duration] = []
        for sequence in 1...7 as ClosedRange<UInt32> {
            cycle(&heartbeat, sequence: sequence, answered: true)
            intervals.append(heartbeat.interval)
        }
        #expect(intervals == [36, 42, 48, 54, 60, 60, 60].map { Duration.seconds($0) })
    }

    @Test("every unanswered heartbeat takes 3 steps off, down to the minimum")
    func shrinksToMin() {
        var configuration = Self.seedExample
        configuration.failuresUntilDead = 10
        var heartbeat = AdaptiveHeartbeat(configuration: configuration, mode: .background, now: t0)
        var intervals: [Duration] = []
        for sequence in 1...4 as ClosedRange<UInt32> {
            cycle(&heartbeat, sequence: sequence, answered: false)
            intervals.append(heartbeat.interval)
        }
        #expect(intervals == [12, 6, 6, 6].map { Duration.seconds($0) })
        #expect(heartbeat.consecutiveFailures == 4)
        // And back up from the minimum one step per success.
        cycle(&heartbeat, sequence: 5, answered: true)
        #expect(heartbeat.interval == .seconds(12))
        #expect(heartbeat.consecutiveFailures == 0)
    }

    @Test("three unanswered heartbeats in a row: dead, and dead it stays until a new connection")
    func threeFailuresDead() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        let first = cycle(&heartbeat, sequence: 1, answered: false)
        // Retry at once after a failure.
        #expect(heartbeat.nextAction(now: first) == .sendHeartbeat)
        let second = cycle(&heartbeat, sequence: 2, answered: false)
        #expect(heartbeat.consecutiveFailures == 2)
        #expect(heartbeat.nextAction(now: second) == .sendHeartbeat)
        heartbeat.heartbeatSent(sequence: 3, at: second)
        let deadline = second + heartbeat.ackTimeout
        #expect(heartbeat.nextAction(now: deadline - .nanoseconds(1)) == .wait(until: deadline))
        #expect(heartbeat.nextAction(now: deadline) == .dead)
        #expect(heartbeat.isDead)
        #expect(heartbeat.consecutiveFailures == 3)

        // Stays dead: later calls, frames and ACKs change nothing.
        heartbeat.ackReceived(sequence: 3, at: deadline + .seconds(1))
        heartbeat.frameReceived(at: deadline + .seconds(2))
        heartbeat.heartbeatSent(sequence: 4, at: deadline + .seconds(3))
        #expect(heartbeat.nextAction(now: deadline + .seconds(100)) == .dead)
        #expect(heartbeat.interval == .seconds(6))

        // A new connection: alive, failures cleared, the learned (short) interval kept.
        let reconnected = deadline + .seconds(200)
        heartbeat.connectionStarted(now: reconnected)
        #expect(!heartbeat.isDead)
        #expect(heartbeat.consecutiveFailures == 0)
        #expect(heartbeat.interval == .seconds(6))
        #expect(heartbeat.nextAction(now: reconnected) == .wait(until: reconnected + .seconds(6)))
    }

    @Test("a probe after the network came back: unanswered within one ACK timeout, dead at once; answered, alive")
    func probe() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        cycle(&heartbeat, sequence: 1, answered: true, rtt: .milliseconds(750))  // ACK timeout 3 s
        let back = t0 + .seconds(5)
        heartbeat.probeSent(sequence: 2, at: back)
        #expect(heartbeat.nextAction(now: back + .seconds(3) - .nanoseconds(1)) == .wait(until: back + .seconds(3)))
        #expect(heartbeat.nextAction(now: back + .seconds(3)) == .dead, "no retries: one silent ACK timeout is enough")
        #expect(heartbeat.consecutiveFailures == 1)

        // Answered, it is an ordinary success: alive, an RTT sample, no failure.
        var alive = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        alive.probeSent(sequence: 1, at: t0)
        alive.ackReceived(sequence: 1, at: t0 + .seconds(1))
        #expect(alive.smoothedRTT == .seconds(1))
        #expect(!alive.isDead)
        #expect(alive.nextAction(now: t0 + .seconds(20)) != .dead)
        #expect(alive.consecutiveFailures == 0)
    }

    @Test("a heartbeat already outstanding becomes the probe, keeping its deadline")
    func outstandingBecomesProbe() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        let none = heartbeat.makeOutstandingDecisive(now: t0)
        #expect(!none, "nothing outstanding")
        cycle(&heartbeat, sequence: 1, answered: true, rtt: .milliseconds(750))  // ACK timeout 3 s
        let sent = t0 + .seconds(40)
        heartbeat.heartbeatSent(sequence: 2, at: sent)
        let made = heartbeat.makeOutstandingDecisive(now: sent + .seconds(2))
        #expect(made)
        #expect(heartbeat.nextAction(now: sent + .seconds(2)) == .wait(until: sent + .seconds(3)), "the original deadline")
        #expect(heartbeat.nextAction(now: sent + .seconds(3)) == .dead, "one failure is enough now")
    }

    @Test("a round trip measured outside the heartbeat sets the ACK timeout until a heartbeat measures one")
    func roundTripMeasured() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        #expect(heartbeat.ackTimeout == .seconds(10), "nothing known: the maximum")
        heartbeat.roundTripMeasured(.milliseconds(900))
        #expect(heartbeat.ackTimeout == .milliseconds(3_600))
        heartbeat.roundTripMeasured(.seconds(2))
        #expect(heartbeat.smoothedRTT == .milliseconds(900), "only the first, while none is known")
        cycle(&heartbeat, sequence: 1, answered: true, rtt: .milliseconds(100))
        #expect(heartbeat.smoothedRTT == .microseconds(800_000), "then heartbeats smooth it: 7/8 · 0.9 + 1/8 · 0.1")
    }

    @Test("one answered heartbeat between failures clears the count")
    func successResetsCount() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        cycle(&heartbeat, sequence: 1, answered: false)
        cycle(&heartbeat, sequence: 2, answered: false)
        #expect(heartbeat.consecutiveFailures == 2)
        cycle(&heartbeat, sequence: 3, answered: true)
        #expect(heartbeat.consecutiveFailures == 0)
        cycle(&heartbeat, sequence: 4, answered: false)
        let end = cycle(&heartbeat, sequence: 5, answered: false)
        #expect(heartbeat.consecutiveFailures == 2)
        #expect(heartbeat.nextAction(now: end) == .sendHeartbeat)  // not dead: retry
        cycle(&heartbeat, sequence: 6, answered: false)
        #expect(heartbeat.isDead)
    }

    @Test("with failuresUntilDead 1, the first unanswered heartbeat is fatal")
    func oneFailureDead() {
        var configuration = Self.seedExample
        configuration.failuresUntilDead = 1
        var heartbeat = AdaptiveHeartbeat(configuration: configuration, now: t0)
        heartbeat.heartbeatSent(sequence: 1, at: t0 + .seconds(30))
        #expect(heartbeat.nextAction(now: t0 + .seconds(40)) == .dead)
    }

    @Test("calling nextAction again at the same instant counts no failure twice")
    func idempotent() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        let sent = t0 + .seconds(30)
        #expect(heartbeat.nextAction(now: sent) == .sendHeartbeat)
        #expect(heartbeat.nextAction(now: sent) == .sendHeartbeat)
        heartbeat.heartbeatSent(sequence: 1, at: sent)
        let deadline = sent + .seconds(10)
        for _ in 0..<5 {
            #expect(heartbeat.nextAction(now: deadline) == .sendHeartbeat)
            #expect(heartbeat.nextAction(now: deadline + .seconds(1)) == .sendHeartbeat)
        }
        #expect(heartbeat.consecutiveFailures == 1)
        #expect(heartbeat.interval == .seconds(12))
    }

    @Test("no heartbeat is due while one is outstanding: the ACK deadline is what is waited for")
    func outstandingBlocksNext() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        heartbeat.heartbeatSent(sequence: 1, at: t0 + .seconds(30))
        #expect(heartbeat.isHeartbeatOutstanding)
        // Long past the interval for both idle timers, but the ACK may still come.
        #expect(heartbeat.nextAction(now: t0 + .seconds(39)) == .wait(until: t0 + .seconds(40)))
        heartbeat.ackReceived(sequence: 1, at: t0 + .seconds(39))
        #expect(!heartbeat.isHeartbeatOutstanding)
        // Nothing received since 39, the heartbeat (a frame) went out at 30: due at 30 + 36.
        #expect(heartbeat.nextAction(now: t0 + .seconds(39)) == .wait(until: t0 + .seconds(66)))
    }

    @Test("due after `interval` without sending, even while frames keep arriving")
    func idleSend() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        for second in stride(from: 1, through: 29, by: 2) {
            heartbeat.frameReceived(at: t0 + .seconds(second))
            #expect(heartbeat.nextAction(now: t0 + .seconds(second)) == .wait(until: t0 + .seconds(30)))
        }
        #expect(heartbeat.nextAction(now: t0 + .seconds(30)) == .sendHeartbeat)
    }

    @Test("due after `interval` without receiving, even while frames keep going out")
    func idleReceive() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        heartbeat.frameReceived(at: t0 + .seconds(4))
        for second in stride(from: 5, through: 33, by: 2) {
            heartbeat.frameSent(at: t0 + .seconds(second))
            #expect(heartbeat.nextAction(now: t0 + .seconds(second)) == .wait(until: t0 + .seconds(34)))
        }
        #expect(heartbeat.nextAction(now: t0 + .seconds(34)) == .sendHeartbeat)
    }

    @Test("traffic in both directions keeps the heartbeat away; a frame from the past moves nothing back")
    func trafficBothWays() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        for second in stride(from: 10, through: 300, by: 10) {
            heartbeat.frameSent(at: t0 + .seconds(second))
            heartbeat.frameReceived(at: t0 + .seconds(second))
            #expect(heartbeat.nextAction(now: t0 + .seconds(second)) == .wait(until: t0 + .seconds(second + 30)))
        }
        heartbeat.frameReceived(at: t0 + .seconds(1))
        #expect(heartbeat.nextAction(now: t0 + .seconds(300)) == .wait(until: t0 + .seconds(330)))
    }

    @Test("the ACK timeout is rttFactor × smoothed RTT, clamped; before any RTT it is the maximum")
    func ackTimeoutFromRTT() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        #expect(heartbeat.ackTimeout == .seconds(10))
        cycle(&heartbeat, sequence: 1, answered: true, rtt: .seconds(1))
        #expect(heartbeat.smoothedRTT == .seconds(1))
        #expect(heartbeat.ackTimeout == .seconds(4))
        // srtt = 7/8 · 1 + 1/8 · 3 = 1.25 s, timeout 5 s.
        cycle(&heartbeat, sequence: 2, answered: true, rtt: .seconds(3))
        #expect(heartbeat.smoothedRTT == .milliseconds(1_250))
        #expect(heartbeat.ackTimeout == .seconds(5))
        // srtt = 7/8 · 1.25 + 1/8 · 0.25 = 1.125 s, timeout 4.5 s.
        cycle(&heartbeat, sequence: 3, answered: true, rtt: .milliseconds(250))
        #expect(heartbeat.smoothedRTT == .milliseconds(1_125))
        #expect(heartbeat.ackTimeout == .milliseconds(4_500))

        // A fast network: 4 × 100 ms is below the minimum.
        var fast = AdaptiveHeartbeat(configuration: Self.seedExample, now: t0)
        cycle(&fast, sequence: 1, answered: true, rtt: .milliseconds(100))
        #expect(fast.smoothedRTT == .milliseconds(100))
        #expect(fast.ackTimeout == .seconds(2))

        // A slow one: 4 × 5 s is above the maximum... but 5 s round trips fit in 10 s.
        var slow = AdaptiveHeartbeat(configuration: Self.seedExample, now: t0)
        cycle(&slow, sequence: 1, answered: true, rtt: .seconds(5))
        #expect(slow.ackTimeout == .seconds(10))

        // Another factor.
        var configuration = Self.seedExample
        configuration.rttFactor = 2
        configuration.minAckTimeout = .milliseconds(500)
        var custom = AdaptiveHeartbeat(configuration: configuration, now: t0)
        cycle(&custom, sequence: 1, answered: true, rtt: .seconds(1))
        #expect(custom.ackTimeout == .seconds(2))
    }

    @Test("the learned ACK timeout decides when an unanswered heartbeat fails")
    func learnedTimeoutApplies() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        let end = cycle(&heartbeat, sequence: 1, answered: true, rtt: .milliseconds(750))  // timeout 3 s
        let due = end - .milliseconds(750) + .seconds(36)
        #expect(heartbeat.nextAction(now: due) == .sendHeartbeat)
        heartbeat.heartbeatSent(sequence: 2, at: due)
        #expect(heartbeat.nextAction(now: due) == .wait(until: due + .seconds(3)))
        #expect(heartbeat.nextAction(now: due + .seconds(3)) == .sendHeartbeat)
        #expect(heartbeat.consecutiveFailures == 1)
    }

    @Test("an ACK before the deadline succeeds; at or after it, it is too late and a failure")
    func lateAck() {
        var onTime = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        onTime.heartbeatSent(sequence: 1, at: t0 + .seconds(30))
        onTime.ackReceived(sequence: 1, at: t0 + .seconds(40) - .nanoseconds(1))
        #expect(onTime.consecutiveFailures == 0)
        #expect(onTime.interval == .seconds(36))

        var late = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        late.heartbeatSent(sequence: 1, at: t0 + .seconds(30))
        late.ackReceived(sequence: 1, at: t0 + .seconds(40))
        #expect(late.consecutiveFailures == 1)
        #expect(late.interval == .seconds(12))
        #expect(late.smoothedRTT == nil)
        #expect(late.nextAction(now: t0 + .seconds(40)) == .sendHeartbeat)
    }

    @Test("ACKs for other sequences are ignored")
    func otherSequence() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        heartbeat.heartbeatSent(sequence: 7, at: t0 + .seconds(30))
        heartbeat.ackReceived(sequence: 8, at: t0 + .seconds(31))
        #expect(heartbeat.isHeartbeatOutstanding)
        #expect(heartbeat.smoothedRTT == nil)
        #expect(heartbeat.interval == .seconds(30))
        #expect(heartbeat.nextAction(now: t0 + .seconds(31)) == .wait(until: t0 + .seconds(40)))
        // Without anything outstanding, an ACK is just a received frame.
        heartbeat.ackReceived(sequence: 7, at: t0 + .seconds(32))
        heartbeat.ackReceived(sequence: 7, at: t0 + .seconds(33))
        #expect(heartbeat.interval == .seconds(36))
        #expect(heartbeat.smoothedRTT == .seconds(2))
    }

    @Test("foreground with a fixed interval: answers and failures leave it alone, failures still kill")
    func foregroundFixed() {
        var configuration = Self.seedExample
        configuration.foregroundInterval = .seconds(20)
        var heartbeat = AdaptiveHeartbeat(configuration: configuration, mode: .foreground, now: t0)
        #expect(heartbeat.isFixed)
        #expect(heartbeat.interval == .seconds(20))
        #expect(heartbeat.nextAction(now: t0) == .wait(until: t0 + .seconds(20)))
        cycle(&heartbeat, sequence: 1, answered: true)
        cycle(&heartbeat, sequence: 2, answered: true)
        #expect(heartbeat.interval == .seconds(20))
        #expect(heartbeat.adaptiveInterval == .seconds(30))
        cycle(&heartbeat, sequence: 3, answered: false)
        cycle(&heartbeat, sequence: 4, answered: false)
        #expect(heartbeat.interval == .seconds(20))
        #expect(heartbeat.adaptiveInterval == .seconds(30))
        cycle(&heartbeat, sequence: 5, answered: false)
        #expect(heartbeat.isDead)

        // In the background the same heartbeat adapts.
        var background = AdaptiveHeartbeat(configuration: configuration, mode: .background, now: t0)
        #expect(!background.isFixed)
        #expect(background.interval == .seconds(30))
        cycle(&background, sequence: 1, answered: true)
        #expect(background.interval == .seconds(36))
    }

    @Test("the fixed foreground interval is clamped to [min, max]")
    func foregroundClamped() {
        var configuration = Self.seedExample
        configuration.foregroundInterval = .seconds(100)
        #expect(AdaptiveHeartbeat(configuration: configuration, now: t0).interval == .seconds(60))
        configuration.foregroundInterval = .seconds(1)
        #expect(AdaptiveHeartbeat(configuration: configuration, now: t0).interval == .seconds(6))
    }

    @Test("foreground without a fixed interval adapts like the background")
    func foregroundAdaptive() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .foreground, now: t0)
        #expect(!heartbeat.isFixed)
        cycle(&heartbeat, sequence: 1, answered: true)
        #expect(heartbeat.interval == .seconds(36))
    }

    @Test("back to the foreground: a heartbeat is due at once; to the background: the adaptive interval")
    func modeSwitch() {
        var configuration = Self.seedExample
        configuration.foregroundInterval = .seconds(10)
        var heartbeat = AdaptiveHeartbeat(configuration: configuration, mode: .foreground, now: t0)
        #expect(heartbeat.interval == .seconds(10))

        heartbeat.frameSent(at: t0 + .seconds(5))
        heartbeat.frameReceived(at: t0 + .seconds(5))
        heartbeat.setMode(.background, now: t0 + .seconds(5))
        #expect(heartbeat.mode == .background)
        #expect(heartbeat.interval == .seconds(30))
        #expect(heartbeat.nextAction(now: t0 + .seconds(6)) == .wait(until: t0 + .seconds(35)))

        heartbeat.setMode(.foreground, now: t0 + .seconds(7))
        #expect(heartbeat.interval == .seconds(10))
        #expect(heartbeat.nextAction(now: t0 + .seconds(7)) == .sendHeartbeat)
        heartbeat.heartbeatSent(sequence: 1, at: t0 + .seconds(7))
        heartbeat.ackReceived(sequence: 1, at: t0 + .seconds(8))
        #expect(heartbeat.nextAction(now: t0 + .seconds(8)) == .wait(until: t0 + .seconds(17)))

        // Already in the foreground: no extra heartbeat.
        heartbeat.setMode(.foreground, now: t0 + .seconds(9))
        #expect(heartbeat.nextAction(now: t0 + .seconds(9)) == .wait(until: t0 + .seconds(17)))
    }

    @Test("the adaptive interval survives a stay in the fixed foreground")
    func adaptiveKeptAcrossModes() {
        var configuration = Self.seedExample
        configuration.foregroundInterval = .seconds(10)
        var heartbeat = AdaptiveHeartbeat(configuration: configuration, mode: .background, now: t0)
        cycle(&heartbeat, sequence: 1, answered: true)
        cycle(&heartbeat, sequence: 2, answered: true)
        #expect(heartbeat.interval == .seconds(42))
        heartbeat.setMode(.foreground, now: t0 + .seconds(100))
        #expect(heartbeat.interval == .seconds(10))
        heartbeat.setMode(.background, now: t0 + .seconds(101))
        #expect(heartbeat.interval == .seconds(42))
    }

    @Test("a new connection forgets the outstanding heartbeat and failures, keeps interval and RTT")
    func connectionStarted() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        cycle(&heartbeat, sequence: 1, answered: true, rtt: .seconds(1))
        cycle(&heartbeat, sequence: 2, answered: false)
        #expect(heartbeat.interval == .seconds(18))
        heartbeat.heartbeatSent(sequence: 3, at: t0 + .seconds(500))
        let restart = t0 + .seconds(501)
        heartbeat.connectionStarted(now: restart)
        #expect(!heartbeat.isHeartbeatOutstanding)
        #expect(heartbeat.consecutiveFailures == 0)
        #expect(heartbeat.interval == .seconds(18))
        #expect(heartbeat.smoothedRTT == .seconds(1))
        #expect(heartbeat.nextAction(now: restart + .seconds(20)) == .sendHeartbeat)
        #expect(heartbeat.nextAction(now: restart) == .wait(until: restart + .seconds(18)))
        // The forgotten heartbeat's ACK is ignored.
        heartbeat.ackReceived(sequence: 3, at: restart + .seconds(1))
        #expect(heartbeat.interval == .seconds(18))
    }

    @Test("reconfigure keeps what was learned, within the new bounds")
    func reconfigure() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        cycle(&heartbeat, sequence: 1, answered: true, rtt: .seconds(1))
        #expect(heartbeat.interval == .seconds(36))
        var lower = Self.seedExample
        lower.maxInterval = .seconds(20)
        heartbeat.reconfigure(lower)
        #expect(heartbeat.interval == .seconds(20))
        #expect(heartbeat.step == .seconds(2))
        #expect(heartbeat.smoothedRTT == .seconds(1))
        #expect(heartbeat.configuration.maxInterval == .seconds(20))
    }

    @Test("detectionBound is interval + failuresUntilDead × ackTimeout")
    func detectionBoundFormula() {
        var heartbeat = AdaptiveHeartbeat(configuration: Self.seedExample, mode: .background, now: t0)
        #expect(heartbeat.detectionBound == .seconds(30 + 3 * 10))
        cycle(&heartbeat, sequence: 1, answered: true, rtt: .seconds(1))
        #expect(heartbeat.detectionBound == .seconds(36 + 3 * 4))
    }

    // MARK: Detection bound, simulated

    struct Scenario: Sendable, CustomTestStringConvertible {
        var configuration: AdaptiveHeartbeat.Configuration
        var mode: AdaptiveHeartbeat.Mode
        var rtt: Duration
        /// When the link goes silent, from the start.
        var silence: Duration
        /// The app writes a frame this often (until the silence: afterwards writes vanish).
        var sendEvery: Duration?
        /// The peer's frames arrive this often until the silence.
        var receiveEvery: Duration?

        var testDescription: String {
            "max \(configuration.maxInterval) fg \(String(describing: configuration.foregroundInterval)) \(mode) rtt \(rtt) silence \(silence)"
        }
    }

    /// Drives a heartbeat the way the client does, with a peer that answers after `rtt`
    /// until the silence. Returns (detection bound at the silence, when `.dead` came).
    static func simulate(_ scenario: Scenario, start: Instant) -> (bound: Duration, deadAt: Instant)? {
        var heartbeat = AdaptiveHeartbeat(configuration: scenario.configuration, mode: scenario.mode, now: start)
        let silence = start + scenario.silence
        var now = start
        var nextSend = scenario.sendEvery.map { start + $0 }
        var nextReceive = scenario.receiveEvery.map { start + $0 }
        var pendingAck: (sequence: UInt32, at: Instant)?
        var sequence: UInt32 = 0
        var bound: Duration?
        for _ in 0..<100_000 {
            if let at = nextSend, at == now {
                if at <= silence { heartbeat.frameSent(at: now) }
                nextSend = at + scenario.sendEvery!
            }
            if let at = nextReceive, at == now {
                if at <= silence { heartbeat.frameReceived(at: now) }
                nextReceive = at + scenario.receiveEvery!
            }
            if let ack = pendingAck, ack.at == now {
                heartbeat.ackReceived(sequence: ack.sequence, at: now)
                pendingAck = nil
            }
            var action = heartbeat.nextAction(now: now)
            if action == .sendHeartbeat {
                sequence += 1
                heartbeat.heartbeatSent(sequence: sequence, at: now)
                if now + scenario.rtt <= silence { pendingAck = (sequence, now + scenario.rtt) }
                action = heartbeat.nextAction(now: now)
            }
            if now == silence { bound = heartbeat.detectionBound }
            var candidates: [Instant] = []
            switch action {
            case .dead:
                guard let bound else { return nil }  // died before the silence: not this test
                return (bound, now)
            case .sendHeartbeat:
                Issue.record("a heartbeat is still due right after sending one")
                return nil
            case .wait(let until):
                candidates.append(until)
            }
            if let nextSend { candidates.append(nextSend) }
            if let nextReceive { candidates.append(nextReceive) }
            if let pendingAck { candidates.append(pendingAck.at) }
            if now < silence { candidates.append(silence) }
            let next = candidates.min()!
            #expect(next > now, "time must advance")
            now = next
        }
        Issue.record("never dead")
        return nil
    }

    static let scenarios: [Scenario] = [
        // The worst case: a frame just went each way when the link went silent.
        Scenario(configuration: .init(), mode: .foreground, rtt: .milliseconds(80), silence: .seconds(100),
                 sendEvery: .seconds(1), receiveEvery: .seconds(1)),
        Scenario(configuration: seedExample, mode: .background, rtt: .seconds(1), silence: .seconds(600),
                 sendEvery: .seconds(5), receiveEvery: .seconds(5)),
        Scenario(configuration: .init(foregroundInterval: .seconds(10)), mode: .foreground, rtt: .milliseconds(300),
                 silence: .seconds(60), sendEvery: .seconds(2), receiveEvery: .seconds(3)),
        // No traffic but heartbeats; silence at odd instants, also while one is outstanding.
        Scenario(configuration: .init(), mode: .background, rtt: .milliseconds(200), silence: .milliseconds(97_300)),
        Scenario(configuration: .init(), mode: .background, rtt: .milliseconds(200), silence: .milliseconds(15_100)),
        Scenario(configuration: seedExample, mode: .foreground, rtt: .seconds(2), silence: .seconds(1_000)),
        Scenario(configuration: .init(failuresUntilDead: 1), mode: .background, rtt: .milliseconds(50), silence: .seconds(77)),
        Scenario(configuration: .init(failuresUntilDead: 6, rttFactor: 10), mode: .background, rtt: .milliseconds(400),
                 silence: .seconds(333)),
        // Only pushes arrive / only writes go out.
        Scenario(configuration: .init(), mode: .foreground, rtt: .milliseconds(100), silence: .seconds(200),
                 receiveEvery: .milliseconds(700)),
        Scenario(configuration: .init(), mode: .foreground, rtt: .milliseconds(100), silence: .seconds(200),
                 sendEvery: .milliseconds(700)),
    ]

    @Test("a link silent from T is declared dead by T + detectionBound", arguments: scenarios)
    func detectionBoundHolds(scenario: Scenario) throws {
        let (bound, deadAt) = try #require(Self.simulate(scenario, start: t0))
        let silence = t0 + scenario.silence
        #expect(deadAt > silence)
        #expect(deadAt <= silence + bound, "dead at \(deadAt - silence) after the silence, bound \(bound)")
    }

    @Test("the bound is exact in the worst case: frames just went both ways when the silence began")
    func detectionBoundExact() throws {
        for scenario in Self.scenarios.prefix(2) {
            let (bound, deadAt) = try #require(Self.simulate(scenario, start: t0))
            #expect(deadAt == t0 + scenario.silence + bound)
        }
    }

    @Test("the bound holds for 300 random configurations, traffic patterns and silences")
    func detectionBoundRandom() throws {
        var generator = SeededGenerator(seed: 2024)
        func seconds(_ range: ClosedRange<Double>) -> Duration {
            .milliseconds(Int64((Double.random(in: range, using: &generator) * 1000).rounded()))
        }
        var checked = 0
        for _ in 0..<300 {
            let minInterval = seconds(1...20)
            let maxInterval = minInterval + seconds(0...100)
            let minAck = seconds(0.5...5)
            let configuration = AdaptiveHeartbeat.Configuration(
                minInterval: minInterval,
                maxInterval: maxInterval,
                foregroundInterval: Bool.random(using: &generator) ? seconds(1...120) : nil,
                failuresUntilDead: Int.random(in: 1...5, using: &generator),
                minAckTimeout: minAck,
                maxAckTimeout: minAck + seconds(0...10),
                rttFactor: Double.random(in: 1...8, using: &generator))
            let scenario = Scenario(
                configuration: configuration,
                mode: Bool.random(using: &generator) ? .foreground : .background,
                rtt: minAck / Int.random(in: 2...20, using: &generator),  // answered heartbeats succeed
                silence: seconds(0.5...900),
                sendEvery: Bool.random(using: &generator) ? seconds(0.1...30) : nil,
                receiveEvery: Bool.random(using: &generator) ? seconds(0.1...30) : nil)
            let (bound, deadAt) = try #require(Self.simulate(scenario, start: t0), "\(scenario.testDescription)")
            let silence = t0 + scenario.silence
            #expect(deadAt > silence, "\(scenario.testDescription)")
            #expect(deadAt <= silence + bound, "\(scenario.testDescription): \(deadAt - silence) > \(bound)")
            checked += 1
        }
        #expect(checked == 300)
    }
}
