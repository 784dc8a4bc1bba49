import Testing

@testable import IMGateway

@Suite("SubscriptionQuota")
struct SubscriptionQuotaTests {
    @Test("filters: what fits is reserved in order, a filter held already counts once, a released one makes room")
    func filters() {
        var quota = SubscriptionQuota(maxSubscriptions: 3, maxWatches: 0)
        let r1 = quota.admit(filters: ["a", "b"])
        #expect(r1 == [true, true])
        let r2 = quota.admit(filters: ["a", "c", "d", "e"])
        #expect(r2 == [true, true, false, false])
        #expect(quota.filters == ["a", "b", "c"])
        quota.release(filters: ["b"])
        let r3 = quota.admit(filters: ["d"])
        #expect(r3 == [true])
        let r4 = quota.admit(filters: ["e"])
        #expect(r4 == [false])
    }

    @Test("watches: presence and location count together; a WATCH that would pass the limit is refused whole")
    func watches() {
        var quota = SubscriptionQuota(maxSubscriptions: 0, maxWatches: 3)
        let r5 = quota.admit(watches: ["bob", "carol"], .presence)
        #expect(r5)
        let r6 = quota.admit(watches: ["dave", "erin"], .location)
        #expect(!r6, "two more would make four")
        #expect(quota.location.isEmpty, "nothing reserved by a refused WATCH")
        let r7 = quota.admit(watches: ["bob"], .presence)
        #expect(r7, "held already: counts once")
        let r8 = quota.admit(watches: ["dave"], .location)
        #expect(r8)
        let r9 = quota.admit(watches: ["erin"], .presence)
        #expect(!r9)
        quota.release(watches: ["bob"], .presence)
        let r10 = quota.admit(watches: ["erin"], .presence)
        #expect(r10)
    }
}
