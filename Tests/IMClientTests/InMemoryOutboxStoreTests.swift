import IMWire
import Testing

@testable import IMClient

@Suite("InMemoryOutboxStore")
struct InMemoryOutboxStoreTests {
    @Test("save inserts or replaces by id, remove deletes, load returns them in id order")
    func roundTrip() async throws {
        let store: any OutboxStore = InMemoryOutboxStore()
        #expect(try await store.load().isEmpty)
        let a = OutboxEntry(id: 2, message: OutboxTests.chat("a"), priority: .chat, durable: true)
        let b = OutboxEntry(id: 1, message: OutboxTests.receipt("b"), priority: .receipt, durable: true)
        try await store.save(a)
        try await store.save(b)
        #expect(try await store.load() == [b, a])

        var changed = a
        changed.attempts = 3
        changed.resend = true
        try await store.save(changed)
        #expect(try await store.load() == [b, changed])

        try await store.remove(1)
        #expect(try await store.load() == [changed])
        try await store.remove(42)
        #expect(try await store.load() == [changed])
        try await store.remove(2)
        #expect(try await store.load().isEmpty)
    }

    @Test("usable as `any OutboxStore`, and what it kept restores an outbox")
    func restoresOutbox() async throws {
        let store: any OutboxStore = InMemoryOutboxStore()
        var outbox = Outbox()
        for index in 0..<3 {
            let (id, _) = outbox.enqueue(OutboxTests.chat("m\(index)"), priority: .chat, durable: true)
            try await store.save(outbox.entry(id)!)
        }
        try await store.remove(outbox.entries[1].id)

        var restarted = Outbox()
        restarted.restore(try await store.load())
        #expect(restarted.entries.map(\.id) == [1, 3])
        #expect(restarted.entries.allSatisfy { $0.resend })
        #expect(restarted.enqueue(OutboxTests.chat("new"), priority: .chat, durable: true).id == 4)
    }
}
