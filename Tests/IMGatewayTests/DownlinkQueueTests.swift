import IMGateway
import Testing

@Suite("DownlinkQueue")
struct DownlinkQueueTests {
    static func drain(_ queue: inout DownlinkQueue<String>) -> [String] {
        var out: [String] = []
        while let next = queue.dequeue() { out.append(next) }
        return out
    }

    @Test("classes go out in priority order, first in first out within each")
    func priority() {
        var queue = DownlinkQueue<String>()
        queue.enqueue("other-1", class: .other)
        queue.enqueue("location-1", class: .location)
        queue.enqueue("presence-1", class: .presence)
        queue.enqueue("receipt-1", class: .receipt)
        queue.enqueue("chat-1", class: .chat)
        queue.enqueue("chat-2", class: .chat)
        queue.enqueue("receipt-2", class: .receipt)
        queue.enqueue("other-2", class: .other)
        #expect(queue.count == 8 && queue.count(of: .chat) == 2)
        #expect(Self.drain(&queue) == ["chat-1", "chat-2", "receipt-1", "receipt-2", "presence-1", "location-1", "other-1", "other-2"])
        #expect(queue.isEmpty && queue.dequeue() == nil)
    }

    @Test("a newer location or presence with the same key replaces the queued one in its place")
    func coalescing() {
        var queue = DownlinkQueue<String>()
        queue.enqueue("alice@1", class: .location, coalescingKey: "alice")
        queue.enqueue("bob@1", class: .location, coalescingKey: "bob")
        queue.enqueue("alice@2", class: .location, coalescingKey: "alice")
        queue.enqueue("alice@3", class: .location, coalescingKey: "alice")
        queue.enqueue("bob/phone online", class: .presence, coalescingKey: "bob/phone")
        queue.enqueue("bob/phone offline", class: .presence, coalescingKey: "bob/phone")
        queue.enqueue("alice (no key)", class: .location)
        #expect(queue.coalescedCount == 3)
        #expect(Self.drain(&queue) == ["bob/phone offline", "alice@3", "bob@1", "alice (no key)"])
        // Once sent, the key starts a new entry.
        queue.enqueue("alice@4", class: .location, coalescingKey: "alice")
        queue.enqueue("alice@5", class: .location, coalescingKey: "alice")
        #expect(Self.drain(&queue) == ["alice@5"])
    }

    @Test("chat, receipts and other frames are never coalesced", arguments: [DownlinkClass.chat, .receipt, .other])
    func noCoalescing(_ kind: DownlinkClass) {
        var queue = DownlinkQueue<String>()
        queue.enqueue("1", class: kind, coalescingKey: "k")
        queue.enqueue("2", class: kind, coalescingKey: "k")
        #expect(Self.drain(&queue) == ["1", "2"])
        #expect(queue.coalescedCount == 0)
    }

    @Test("lossy classes drop their oldest beyond the limit; chat is never dropped")
    func bounds() {
        var queue = DownlinkQueue<String>(lossyLimit: 2)
        for index in 0..<5 { queue.enqueue("loc-\(index)", class: .location, coalescingKey: "user-\(index)") }
        for index in 0..<3 { queue.enqueue("pres-\(index)", class: .presence) }
        for index in 0..<1000 { queue.enqueue("chat-\(index)", class: .chat) }
        for index in 0..<300 { queue.enqueue("other-\(index)", class: .other) }
        #expect(queue.droppedCount == 4)
        #expect(queue.count(of: .chat) == 1000 && queue.count(of: .other) == 300)
        let out = Self.drain(&queue)
        #expect(out.prefix(1000) == ArraySlice((0..<1000).map { "chat-\($0)" }))
        #expect(Array(out[1000..<1004]) == ["pres-1", "pres-2", "loc-3", "loc-4"])
        #expect(out.count == 1304)
        // A dropped entry's key no longer coalesces.
        queue.enqueue("user-0 again", class: .location, coalescingKey: "user-0")
        #expect(queue.dequeue() == "user-0 again")
    }

    @Test("QoS 0 pub/sub goes last and keeps only the newest beyond the limit; QoS 1/2 pub/sub is never dropped")
    func atMostOnce() {
        var queue = DownlinkQueue<String>(lossyLimit: 3)
        for index in 0..<10 { queue.enqueue("qos0-\(index)", class: .atMostOnce) }
        queue.enqueue("qos1-0", class: .other)
        queue.enqueue("chat-0", class: .chat)
        #expect(DownlinkClass.atMostOnce.isLossy && !DownlinkClass.other.isLossy)
        #expect(queue.droppedCount == 7)
        #expect(Self.drain(&queue) == ["chat-0", "qos1-0", "qos0-7", "qos0-8", "qos0-9"])
    }

    @Test("coalescing still finds entries after many have passed through")
    func longRun() {
        var queue = DownlinkQueue<Int>(lossyLimit: 8)
        var expected: [Int] = []
        for round in 0..<500 {
            queue.enqueue(round, class: .location, coalescingKey: "a")
            queue.enqueue(round + 10_000, class: .location, coalescingKey: "a")
            queue.enqueue(round, class: .chat)
            expected = [round, round + 10_000]
            #expect(queue.dequeue() == expected[0])
            #expect(queue.dequeue() == expected[1])
        }
        #expect(queue.isEmpty && queue.coalescedCount == 500 && queue.droppedCount == 0)
    }
}
