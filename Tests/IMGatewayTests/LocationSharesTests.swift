import IMGateway
import Testing

@Suite("LocationShares")
struct LocationSharesTests {
    @Test("only the audience of a running share may watch")
    func audience() {
        var shares = LocationShares(maxDuration: 86400)
        shares.start(sharer: "alice", audience: ["bob", "carol"], duration: 3600, now: 0)
        #expect(shares.canWatch(watcher: "bob", sharer: "alice", now: 0))
        #expect(shares.canWatch(watcher: "carol", sharer: "alice", now: 3599))
        #expect(!shares.canWatch(watcher: "dave", sharer: "alice", now: 0))
        #expect(!shares.canWatch(watcher: "alice", sharer: "bob", now: 0))
        #expect(!shares.canWatch(watcher: "alice", sharer: "alice", now: 0), "the sharer is not in its own audience")
        #expect(shares.audience(of: "alice", now: 10) == ["bob", "carol"])
        #expect(shares.audience(of: "bob", now: 10) == [])
    }

    @Test("a share ends after its duration, clamped to the maximum")
    func expiry() {
        var shares = LocationShares(maxDuration: 100)
        let share = shares.start(sharer: "alice", audience: ["bob"], duration: 3600, now: 50)
        #expect(share.expiresAt == 150)
        #expect(share.remaining(now: 140) == 10)
        #expect(shares.canWatch(watcher: "bob", sharer: "alice", now: 149.9))
        #expect(!shares.canWatch(watcher: "bob", sharer: "alice", now: 150))
        #expect(shares.share(of: "alice", now: 150) == nil)
        #expect(share.remaining(now: 200) == 0)
        shares.start(sharer: "bob", audience: ["alice"], duration: -5, now: 0)
        #expect(!shares.canWatch(watcher: "alice", sharer: "bob", now: 0))
    }

    @Test("a new start replaces the share; stop ends it")
    func replaceAndStop() {
        var shares = LocationShares()
        shares.start(sharer: "alice", audience: ["bob"], duration: 60, now: 0)
        shares.start(sharer: "alice", audience: ["carol"], duration: 10, now: 5)
        #expect(!shares.canWatch(watcher: "bob", sharer: "alice", now: 6))
        #expect(shares.canWatch(watcher: "carol", sharer: "alice", now: 6))
        #expect(!shares.canWatch(watcher: "carol", sharer: "alice", now: 15))
        #expect(shares.stop(sharer: "alice")?.audience == ["carol"])
        #expect(shares.stop(sharer: "alice") == nil)
        #expect(shares.count == 0)
    }

    @Test("purge removes ended shares and names their sharers")
    func purge() {
        var shares = LocationShares()
        shares.start(sharer: "carol", audience: ["x"], duration: 10, now: 0)
        shares.start(sharer: "alice", audience: ["x"], duration: 5, now: 0)
        shares.start(sharer: "bob", audience: ["x"], duration: 100, now: 0)
        #expect(shares.purge(now: 4) == [])
        #expect(shares.purge(now: 10) == ["alice", "carol"])
        #expect(shares.count == 1)
        #expect(shares.canWatch(watcher: "x", sharer: "bob", now: 10))
    }
}
