import Testing

@testable import IMGateway

@Suite("ChatRateLimit")
struct ChatRateLimitTests {
    @Test("the burst goes at once; the next is refused with the time to the next token, and everything after it until that message comes back")
    func refusesUntilTheRefusedOneReturns() {
        var limit = ChatRateLimit(ratePerSecond: 10, burst: 3)
        for index in 0..<3 { #expect(limit.admit(messageID: "m\(index)", now: 100) == .allow) }
        #expect(limit.admit(messageID: "m3", now: 100) == .refuse(retryAfterMilliseconds: 100))
        // Until the retry time, everything is refused with the time left.
        #expect(limit.admit(messageID: "m4", now: 100.04) == .refuse(retryAfterMilliseconds: 60))
        #expect(limit.admit(messageID: "m3", now: 100.099) == .refuse(retryAfterMilliseconds: 1), "too early, even the refused one")
        // After it, a later message that arrives late is still refused: m3 has to come first.
        #expect(limit.admit(messageID: "m5", now: 100.15) == .refuse(retryAfterMilliseconds: 1))
        #expect(limit.admit(messageID: "m3", now: 100.15) == .allow)
        // Half a token is left: the next one starts another pause, until 100.2.
        #expect(limit.admit(messageID: "m4", now: 100.15) == .refuse(retryAfterMilliseconds: 50))
        // A client that gives m4 up is let through at most longestHold after the retry time.
        #expect(limit.admit(messageID: "m5", now: 100.2 + ChatRateLimit.longestHold - 0.01) == .refuse(retryAfterMilliseconds: 1))
        #expect(limit.admit(messageID: "m5", now: 100.2 + ChatRateLimit.longestHold + 0.001) == .allow)
    }

    @Test("refusals ignored: counted once per refusal when something else comes past the retry time or the refused one is given up; sending it again clears the count")
    func ignoredRefusals() {
        var limit = ChatRateLimit(ratePerSecond: 10, burst: 1)
        #expect(limit.admit(messageID: "a", now: 100) == .allow)
        #expect(limit.admit(messageID: "b", now: 100) == .refuse(retryAfterMilliseconds: 100))
        _ = limit.admit(messageID: "c", now: 100.05)
        #expect(limit.ignoredRefusals == 0, "before the retry time: the device had not been told to wait yet")
        _ = limit.admit(messageID: "c", now: 100.2)
        _ = limit.admit(messageID: "d", now: 100.3)
        #expect(limit.ignoredRefusals == 1, "once for this refusal")
        // Given up: let through past longestHold, still counted; the next refusal ignored too.
        #expect(limit.admit(messageID: "e", now: 100.1 + ChatRateLimit.longestHold + 0.01) == .allow)
        #expect(limit.admit(messageID: "f", now: 100.1 + ChatRateLimit.longestHold + 0.01) != .allow)
        _ = limit.admit(messageID: "g", now: 103)
        #expect(limit.ignoredRefusals == 2)
        // As the protocol asks: the refused one again, after the retry time.
        #expect(limit.admit(messageID: "f", now: 103.5) == .allow)
        #expect(limit.ignoredRefusals == 0)
    }

    @Test("a long pause refills the whole burst, no more")
    func burst() {
        var limit = ChatRateLimit(ratePerSecond: 1, burst: 3)
        for index in 0..<3 { #expect(limit.admit(messageID: "a\(index)", now: 10) == .allow) }
        #expect(limit.admit(messageID: "a3", now: 10) == .refuse(retryAfterMilliseconds: 1000))
        for index in 3..<6 { #expect(limit.admit(messageID: "a\(index)", now: 1000) == .allow) }
        #expect(limit.admit(messageID: "a6", now: 1000) != .allow)
    }

    @Test("rate 0 is no limit")
    func unlimited() {
        var limit = ChatRateLimit(ratePerSecond: 0, burst: 1)
        for index in 0..<10_000 { #expect(limit.admit(messageID: "u\(index)", now: 1) == .allow) }
    }
}
