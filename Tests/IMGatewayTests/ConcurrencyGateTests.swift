import Synchronization
import Testing

@testable import IMGateway

@Suite("ConcurrencyGate and DeliveryWatchdog")
struct ConcurrencyGateTests {
    @Test("at most `limit` operations run at once, and every one runs")
    func limit() async throws {
        final class Counters: Sendable {
            let running = Atomic<Int>(0)
            let highest = Atomic<Int>(0)
            let done = Atomic<Int>(0)
        }
        let gate = ConcurrencyGate(limit: 3)
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
        let gate = ConcurrencyGate(limit: 1)
        await #expect(throws: Failure.self) { try await gate.run { throw Failure() } }
        #expect(try await gate.run { 7 } == 7, "the slot was given back")
    }

    @Test("the watchdog reports a connection whose oldest delivery is overdue, once, and not the others")
    func watchdog() {
        let watchdog = DeliveryWatchdog(timeout: .zero)
        let stale = PendingDeliveries()
        stale.insert(1, 10)
        let idle = PendingDeliveries()
        let reported = Mutex<[String]>([])
        _ = watchdog.watch(stale) { _ in reported.withLock { $0.append("stale") } }
        let idleID = watchdog.watch(idle) { _ in reported.withLock { $0.append("idle") } }
        watchdog.sweep()
        watchdog.sweep()
        #expect(reported.withLock { $0 } == ["stale"])
        #expect(watchdog.count == 1, "the reported one is forgotten")
        watchdog.forget(idleID)
        #expect(watchdog.count == 0)
    }
}
