import Testing

@testable import IMClient

@Suite("TokenRefreshSchedule: refresh at 80% of the lifetime or 60 s before expiry, retry until it")
struct TokenRefreshScheduleTests {
    static let start = ContinuousClock.now
    /// The gateway's clock at LOGIN_OK: far from any device clock, to show it is not used.
    static let serverTime: UInt64 = 1_735_689_600_123

    static let rules: [(lifetime: Duration, expected: Duration)] = [
        (.seconds(3600), .seconds(2880)),  // 1 h: 80% (48 min) comes before 59 min
        (.seconds(300), .seconds(240)),  // 5 min: both give 4 min
        (.seconds(120), .seconds(60)),  // 2 min: 60 s before comes before 96 s
        (.seconds(61), .seconds(1)),
        (.seconds(60), .zero),  // no time before the margin: at once
        (.seconds(30), .zero),
        (.zero, .zero),
        (.seconds(-10), .zero),  // already expired: at once
    ]

    @Test("the rule with the defaults", arguments: rules)
    func rule(lifetime: Duration, expected: Duration) {
        let point = TokenRefreshSchedule.refreshPoint(
            grantedAt: Self.start, expiresAt: Self.start + lifetime, configuration: .init())
        #expect(point - Self.start == expected)
    }

    @Test("the rule with another share and margin")
    func ruleConfigured() {
        let noMargin = TokenRefreshSchedule.Configuration(lifetimeFraction: 0.8, margin: .zero)
        #expect(TokenRefreshSchedule.refreshPoint(grantedAt: Self.start, expiresAt: Self.start + .seconds(1), configuration: noMargin) - Self.start == .milliseconds(800))
        let half = TokenRefreshSchedule.Configuration(lifetimeFraction: 0.5, margin: .seconds(10))
        #expect(TokenRefreshSchedule.refreshPoint(grantedAt: Self.start, expiresAt: Self.start + .seconds(100), configuration: half) - Self.start == .seconds(50))
        #expect(TokenRefreshSchedule.refreshPoint(grantedAt: Self.start, expiresAt: Self.start + .seconds(15), configuration: half) - Self.start == .seconds(5))
    }

    @Test("LOGIN_OK: the expiry is counted from SERVER_TIME on the monotonic clock; wait, then refresh")
    func loginSchedules() {
        var schedule = TokenRefreshSchedule()
        #expect(schedule.nextAction(now: Self.start) == .none, "nothing known yet")
        schedule.loggedIn(serverTime: Self.serverTime, tokenExpiry: Self.serverTime + 3_600_000, now: Self.start)
        #expect(schedule.expiresAt == Self.start + .seconds(3600))
        #expect(schedule.refreshPoint == Self.start + .seconds(2880))
        #expect(schedule.nextAction(now: Self.start) == .wait(until: Self.start + .seconds(2880)))
        #expect(schedule.nextAction(now: Self.start + .seconds(2879)) == .wait(until: Self.start + .seconds(2880)))
        #expect(!schedule.isRefreshDue(now: Self.start + .seconds(2879)))
        #expect(schedule.nextAction(now: Self.start + .seconds(2880)) == .refresh)
        #expect(schedule.isRefreshDue(now: Self.start + .seconds(2880)))
        #expect(schedule.nextAction(now: Self.start + .seconds(4000)) == .refresh, "still due until started")
    }

    @Test("LOGIN_OK without TOKEN_EXPIRY: nothing is planned")
    func noExpiry() {
        var schedule = TokenRefreshSchedule()
        schedule.loggedIn(serverTime: Self.serverTime, tokenExpiry: nil, now: Self.start)
        #expect(schedule.nextAction(now: Self.start + .seconds(100_000)) == .none)
        #expect(schedule.expiresAt == nil)
        #expect(!schedule.isRefreshDue(now: Self.start + .seconds(100_000)))
    }

    @Test("a token that expired by the gateway's clock is refreshed at once")
    func expiredAtLogin() {
        var schedule = TokenRefreshSchedule()
        schedule.loggedIn(serverTime: Self.serverTime, tokenExpiry: Self.serverTime - 5_000, now: Self.start)
        #expect(schedule.expiresAt == Self.start - .seconds(5))
        #expect(schedule.nextAction(now: Self.start) == .refresh)
    }

    @Test("absurd expiries do not overflow")
    func absurdExpiries() {
        var schedule = TokenRefreshSchedule()
        schedule.loggedIn(serverTime: Self.serverTime, tokenExpiry: .max, now: Self.start)
        guard case .wait(let until) = schedule.nextAction(now: Self.start) else {
            Issue.record("expected a wait")
            return
        }
        #expect(until - Self.start > .seconds(50 * 365 * 86_400))
        schedule.loggedIn(serverTime: .max, tokenExpiry: 0, now: Self.start)
        #expect(schedule.nextAction(now: Self.start) == .refresh)
    }

    @Test("a refresh under way: nothing else is due; its ACK plans from the new expiry, measured from the ACK")
    func refreshedReschedules() {
        var schedule = TokenRefreshSchedule()
        schedule.loggedIn(serverTime: Self.serverTime, tokenExpiry: Self.serverTime + 3_600_000, now: Self.start)
        let due = Self.start + .seconds(2880)
        schedule.refreshStarted()
        #expect(schedule.nextAction(now: due) == .none)
        #expect(schedule.nextAction(now: due + .seconds(10_000)) == .none)
        // ACKed 2 s later with a token valid for another hour from then (server clock).
        let acked = due + .seconds(2)
        schedule.refreshed(tokenExpiry: Self.serverTime + 2_882_000 + 3_600_000, now: acked)
        #expect(schedule.expiresAt == acked + .seconds(3600))
        #expect(schedule.nextAction(now: acked) == .wait(until: acked + .seconds(2880)))
    }

    @Test("the new token need not outlive the old one: the plan follows it")
    func shorterToken() {
        var schedule = TokenRefreshSchedule()
        schedule.loggedIn(serverTime: Self.serverTime, tokenExpiry: Self.serverTime + 3_600_000, now: Self.start)
        schedule.refreshStarted()
        let acked = Self.start + .seconds(10)
        schedule.refreshed(tokenExpiry: Self.serverTime + 10_000 + 120_000, now: acked)
        #expect(schedule.expiresAt == acked + .seconds(120))
        #expect(schedule.nextAction(now: acked) == .wait(until: acked + .seconds(60)))
    }

    @Test("an ACK with SERVER_TIME re-anchors the gateway's clock")
    func reanchor() {
        var schedule = TokenRefreshSchedule()
        schedule.loggedIn(serverTime: Self.serverTime, tokenExpiry: Self.serverTime + 3_600_000, now: Self.start)
        let acked = Self.start + .seconds(10)
        // The gateway's clock reads 5 s more than the anchor says it should.
        schedule.refreshed(tokenExpiry: Self.serverTime + 15_000 + 600_000, serverTime: Self.serverTime + 15_000, now: acked)
        #expect(schedule.expiresAt == acked + .seconds(600))
    }

    @Test("an ACK without TOKEN_EXPIRY: nothing is planned any more")
    func refreshedWithoutExpiry() {
        var schedule = TokenRefreshSchedule()
        schedule.loggedIn(serverTime: Self.serverTime, tokenExpiry: Self.serverTime + 3_600_000, now: Self.start)
        schedule.refreshed(tokenExpiry: nil, now: Self.start + .seconds(1))
        #expect(schedule.nextAction(now: Self.start + .seconds(100_000)) == .none)
    }

    @Test("failures are retried with back-off levels until a retry would come after the expiry")
    func retriesUntilExpiry() {
        let configuration = TokenRefreshSchedule.Configuration()
        var schedule = TokenRefreshSchedule(configuration: configuration)
        var generator = SeededGenerator(seed: 7)
        schedule.loggedIn(serverTime: Self.serverTime, tokenExpiry: Self.serverTime + 300_000, now: Self.start)
        var now = Self.start + .seconds(240)
        #expect(schedule.nextAction(now: now) == .refresh)
        var attempts = 0
        while true {
            schedule.refreshStarted()
            schedule.refreshFailed(now: now, using: &generator)
            attempts += 1
            #expect(schedule.failures == attempts)
            guard case .wait(let until) = schedule.nextAction(now: now) else { break }
            let level = configuration.retryBackoff.level(attempts - 1)
            #expect(until - now > level.lower && until - now <= level.upper, "attempt \(attempts): \(until - now)")
            #expect(until < Self.start + .seconds(300), "never retried after the expiry")
            #expect(schedule.nextAction(now: until) == .refresh)
            now = until
        }
        // 60 s filled with delays from the levels (0,1], (1,2], (2,4] ... (16,32]: the sixth
        // failure's retry may land after the expiry, the eighth's surely does.
        #expect((6...8).contains(attempts), "\(attempts) attempts")
        #expect(schedule.nextAction(now: now) == .none)
        #expect(schedule.nextAction(now: Self.start + .seconds(10_000)) == .none, "exhausted")
        #expect(schedule.isRefreshDue(now: now), "the next LOGIN wants a new token")
    }

    @Test("a success after failures starts over: the next failure waits in the first level again")
    func successResetsFailures() {
        var schedule = TokenRefreshSchedule()
        var generator = SeededGenerator(seed: 3)
        schedule.loggedIn(serverTime: Self.serverTime, tokenExpiry: Self.serverTime + 3_600_000, now: Self.start)
        var now = Self.start + .seconds(2880)
        for _ in 0..<4 {
            schedule.refreshStarted()
            schedule.refreshFailed(now: now, using: &generator)
            now = now + .seconds(20)
        }
        #expect(schedule.failures == 4)
        schedule.refreshed(tokenExpiry: Self.serverTime + 3_000_000 + 3_600_000, now: now)
        #expect(schedule.failures == 0)
        schedule.refreshStarted()
        schedule.refreshFailed(now: now, using: &generator)
        guard case .wait(let until) = schedule.nextAction(now: now) else {
            Issue.record("expected a retry")
            return
        }
        #expect(until - now <= .seconds(1))
    }

    @Test("a lost connection: nothing due until the next LOGIN_OK, but the token's refresh point is kept")
    func connectionLost() {
        var schedule = TokenRefreshSchedule()
        var generator = SeededGenerator(seed: 1)
        schedule.loggedIn(serverTime: Self.serverTime, tokenExpiry: Self.serverTime + 100_000, now: Self.start)
        schedule.refreshStarted()
        schedule.refreshFailed(now: Self.start + .seconds(40), using: &generator)
        schedule.connectionLost()
        #expect(schedule.failures == 0)
        #expect(schedule.nextAction(now: Self.start + .seconds(40)) == .none)
        #expect(schedule.isRefreshDue(now: Self.start + .seconds(40)))
        #expect(!schedule.isRefreshDue(now: Self.start + .seconds(39)))
        // The next LOGIN_OK (with a new token, say) plans afresh.
        schedule.loggedIn(serverTime: Self.serverTime + 50_000, tokenExpiry: Self.serverTime + 50_000 + 3_600_000, now: Self.start + .seconds(50))
        #expect(schedule.nextAction(now: Self.start + .seconds(50)) == .wait(until: Self.start + .seconds(50 + 2880)))
    }
}
