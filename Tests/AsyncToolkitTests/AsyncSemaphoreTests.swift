import Synchronization
import Testing

@testable import AsyncToolkit

@Suite("AsyncSemaphore")
struct AsyncSemaphoreTests {
    @Test("at most `limit` operations run at once, and every one runs")
    func limit() async throws {
        final class Counters: Sendable {
            let running = Atomic<Int>(0)
            let highest = Atomic<Int>(0)
            let done = Atomic<Int>(0)
        }
        let gate = AsyncSemaphore(limit: 3)
        let counters = Counters()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    try await gate.run {
                        let now = counters.running.wrappingAdd(1, ordering: .relaxed).newValue
                        _ = counters.highest.max(now, ordering: .relaxed)
                        try await Task.sleep(for: .milliseconds(5))  // hold the slot a while
                        counters.running.wrappingSubtract(1, ordering: .relaxed)
                        counters.done.wrappingAdd(1, ordering: .relaxed)
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(counters.done.load(ordering: .relaxed) == 50)
        #expect(counters.highest.load(ordering: .relaxed) <= 3)
        #expect(counters.highest.load(ordering: .relaxed) >= 2, "several did run together")
    }

    @Test("an operation that throws frees its slot")
    func throwingFreesSlot() async throws {
        struct Failure: Error {}
        let gate = AsyncSemaphore(limit: 1)
        await #expect(throws: Failure.self) { try await gate.run { throw Failure() } }
        #expect(try await gate.run { 7 } == 7, "the slot was given back")
    }

    @Test("tryAcquire takes a free permit at once and refuses when none is free")
    func tryAcquire() async {
        let gate = AsyncSemaphore(limit: 2)
        #expect(gate.tryAcquire() && gate.tryAcquire())
        #expect(!gate.tryAcquire())
        #expect(gate.inUse == 2)
        let waiter = Task { await gate.acquire() }
        while gate.waiting == 0 { await Task.yield() }
        gate.release()
        #expect(await waiter.value, "the waiter got the permit given back")
        #expect(!gate.tryAcquire(), "and nothing jumped the queue")
        gate.release()
        #expect(gate.tryAcquire())
    }
}
