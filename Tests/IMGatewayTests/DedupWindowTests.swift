import IMGateway
import Testing

@Suite("DedupWindow")
struct DedupWindowTests {
    @Test("an id is new until recorded, then a duplicate carrying its server time")
    func recordThenDuplicate() {
        var window = DedupWindow()
        #expect(window.check(sender: "alice", id: "m-1", now: 0) == .new)
        #expect(window.check(sender: "alice", id: "m-1", now: 1) == .new, "check alone must not record")
        window.record(sender: "alice", id: "m-1", serverTime: 1_735_689_600_123, now: 1)
        #expect(window.check(sender: "alice", id: "m-1", now: 2) == .duplicate(serverTime: 1_735_689_600_123))
        window.record(sender: "alice", id: "m-1", serverTime: 99, now: 3)
        #expect(window.check(sender: "alice", id: "m-1", now: 4) == .duplicate(serverTime: 1_735_689_600_123), "the first record stays")
        window.record(sender: "alice", id: "m-2", now: 5)
        #expect(window.check(sender: "alice", id: "m-2", now: 5) == .duplicate(serverTime: nil))
    }

    @Test("ids are per sender")
    func perSender() {
        var window = DedupWindow()
        window.record(sender: "alice", id: "m-1", now: 0)
        #expect(window.check(sender: "bob", id: "m-1", now: 0) == .new)
        #expect(window.senderCount == 1)
    }

    @Test("each sender keeps only its newest ids")
    func countEviction() {
        var window = DedupWindow(maxIDsPerSender: 3, maxAge: 600)
        for (index, id) in ["a", "b", "c", "d"].enumerated() { window.record(sender: "alice", id: id, now: Double(index)) }
        window.record(sender: "bob", id: "a", now: 4)
        #expect(window.check(sender: "alice", id: "a", now: 5) == .new)
        for id in ["b", "c", "d"] { #expect(window.check(sender: "alice", id: id, now: 5) == .duplicate(serverTime: nil)) }
        #expect(window.check(sender: "bob", id: "a", now: 5) == .duplicate(serverTime: nil))
        #expect(window.idCount == 4)
    }

    @Test("ids are forgotten after maxAge")
    func ageEviction() {
        var window = DedupWindow(maxIDsPerSender: 100, maxAge: 10)
        window.record(sender: "alice", id: "old", now: 0)
        window.record(sender: "alice", id: "new", now: 5)
        #expect(window.check(sender: "alice", id: "old", now: 9.9) == .duplicate(serverTime: nil))
        #expect(window.check(sender: "alice", id: "old", now: 10) == .new)
        #expect(window.check(sender: "alice", id: "new", now: 10) == .duplicate(serverTime: nil))
        #expect(window.idCount == 1)
    }

    @Test("senders that went quiet are swept, so memory stays bounded")
    func sweep() {
        var window = DedupWindow(maxIDsPerSender: 10, maxAge: 60)
        for sender in 0..<1000 {
            for id in 0..<20 { window.record(sender: "user-\(sender)", id: "m-\(id)", now: Double(sender) * 0.01) }
        }
        #expect(window.senderCount == 1000)
        #expect(window.idCount == 10_000, "at most maxIDsPerSender each")
        // Another sender's traffic a while later triggers the sweep of everyone.
        _ = window.check(sender: "someone", id: "x", now: 75)
        #expect(window.senderCount == 0 && window.idCount == 0)
        window.record(sender: "user-1", id: "m-1", now: 80)
        window.purge(now: 200)
        #expect(window.senderCount == 0)
    }
}
