import IMWire
import Testing

@testable import IMClient

@Suite("PendingAcks: requests awaiting their ACK")
struct PendingAcksTests {
    let start = ContinuousClock.now

    @Test("an ACK that arrives before the waiter is attached is kept for it")
    func ackBeforeAttach() {
        var pending = PendingAcks<Int>()
        pending.insert(7, deadline: start + .seconds(10))
        #expect(pending.contains(7))
        let early = pending.settle(7, with: .success(Ack(sequence: 7, messageID: "m-1")))
        #expect(early == nil, "no waiter yet")
        let outcome = pending.attach(1, to: 7)
        #expect(outcome == .success(Ack(sequence: 7, messageID: "m-1")))
        #expect(!pending.contains(7), "settled and taken: the sequence may be reused")
    }

    @Test("an ACK for an attached waiter returns the waiter, once")
    func ackAfterAttach() {
        var pending = PendingAcks<Int>()
        pending.insert(3, deadline: start + .seconds(10))
        let attached = pending.attach(42, to: 3)
        #expect(attached == nil)
        let waiter = pending.settle(3, with: .success(Ack(sequence: 3)))
        #expect(waiter == 42)
        let again = pending.settle(3, with: .success(Ack(sequence: 3)))
        #expect(again == nil, "a second ACK of the same frame is ignored")
        #expect(pending.count == 0)
    }

    @Test("ACKs of frames nobody waits for (heartbeats) are ignored")
    func unknownSequence() {
        var pending = PendingAcks<Int>()
        let waiter = pending.settle(99, with: .success(Ack(sequence: 99)))
        #expect(waiter == nil)
        #expect(pending.count == 0)
    }

    @Test("requests past their deadline time out; the others stay")
    func expiry() {
        var pending = PendingAcks<String>()
        pending.insert(1, deadline: start + .seconds(1))
        pending.insert(2, deadline: start + .seconds(5))
        pending.insert(3, deadline: start + .seconds(1))
        _ = pending.attach("one", to: 1)
        _ = pending.attach("two", to: 2)
        #expect(pending.nextDeadline == start + .seconds(1))
        let expired = pending.expire(now: start + .seconds(2))
        #expect(expired == ["one"], "3 has no waiter yet: its timeout is stored")
        let stored = pending.attach("three", to: 3)
        #expect(stored == .failure(.timeout))
        #expect(pending.nextDeadline == start + .seconds(5))
        let late = pending.settle(1, with: .success(Ack(sequence: 1)))
        #expect(late == nil, "a late ACK finds nothing")
        #expect(pending.contains(2))
    }

    @Test("the end of the connection fails every request, attached or not")
    func failAll() {
        var pending = PendingAcks<Int>()
        for sequence in UInt32(1)...3 { pending.insert(sequence, deadline: start + .seconds(10)) }
        _ = pending.attach(10, to: 1)
        _ = pending.attach(30, to: 3)
        let failed = pending.failAll(with: .disconnected)
        #expect(failed == [10, 30])
        let stored = pending.attach(20, to: 2)
        #expect(stored == .failure(.disconnected))
        #expect(pending.count == 0)
    }
}

@Suite("SequenceCounter")
struct SequenceCounterTests {
    @Test("starts at 1 and counts up")
    func counts() {
        var counter = SequenceCounter()
        let numbers = [counter.next(), counter.next(), counter.next()]
        #expect(numbers == [1, 2, 3])
    }

    @Test("wraps from 0xFFFFFFFF to 0 and skips numbers still awaiting an ACK")
    func wrapsAndSkips() {
        var counter = SequenceCounter(last: 0xFFFF_FFFE)
        let inUse: Set<UInt32> = [0, 1]
        let last = counter.next(skipping: inUse.contains)
        let wrapped = counter.next(skipping: inUse.contains)
        #expect(last == 0xFFFF_FFFF)
        #expect(wrapped == 2, "0 and 1 still await their ACK")
    }
}

@Suite("DeliveryDedup: a bounded window of (sender, message id)")
struct DeliveryDedupTests {
    @Test("the first sighting counts, a repeat does not; the sender is part of the key")
    func repeats() {
        var dedup = DeliveryDedup(capacity: 8)
        let sightings = [
            dedup.firstSighting(sender: "alice", messageID: "m-1"),
            dedup.firstSighting(sender: "alice", messageID: "m-1"),
            dedup.firstSighting(sender: "carol", messageID: "m-1"),
        ]
        #expect(sightings == [true, false, true])
        #expect(dedup.count == 2)
    }

    @Test("the oldest key is forgotten first once the window is full")
    func eviction() {
        var dedup = DeliveryDedup(capacity: 3)
        let firsts = ["a", "b", "c", "d"].map { dedup.firstSighting(sender: "s", messageID: $0) }
        #expect(firsts == [true, true, true, true])
        #expect(dedup.count == 3)
        #expect(!dedup.contains(sender: "s", messageID: "a"))
        #expect(dedup.contains(sender: "s", messageID: "b"))
        let repeated = dedup.firstSighting(sender: "s", messageID: "d")
        #expect(!repeated, "a repeat does not refresh or grow the window")
        let forgotten = dedup.firstSighting(sender: "s", messageID: "a")
        #expect(forgotten, "forgotten: seen as new")
        #expect(!dedup.contains(sender: "s", messageID: "b"))
        #expect(dedup.count == 3)
    }
}
