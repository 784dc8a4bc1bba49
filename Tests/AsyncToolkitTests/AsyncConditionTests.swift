import Testing

@testable import AsyncToolkit

@Suite("AsyncCondition", .timeLimit(.minutes(1)))
struct AsyncConditionTests {
    @Test("a wait whose condition holds returns at once; others return when a change makes it hold, with what the condition made of the state")
    func waitsForItsCondition() async {
        let condition = AsyncCondition(0)
        #expect(await condition.wait { $0 == 0 })
        let waiter = Task { await condition.wait { (value: inout Int) -> String? in value >= 3 ? "reached \(value)" : nil } }
        while condition.waiting == 0 { await Task.yield() }
        condition.withLock { $0 = 1 }
        condition.withLock { $0 = 2 }
        #expect(condition.waiting == 1, "not yet")
        condition.withLock { $0 = 3 }
        #expect(await waiter.value == "reached 3")
        #expect(condition.waiting == 0)
    }

    @Test("every waiter whose condition holds is woken by one change (none is lost between its check and its registration)")
    func noLostWakeups() async {
        for _ in 0..<50 {
            let condition = AsyncCondition(false)
            let waiters = (0..<20).map { _ in Task { await condition.wait { $0 } } }
            // The change may come before, during or after each registration.
            condition.withLock { $0 = true }
            for waiter in waiters { #expect(await waiter.value) }
        }
    }

    @Test("a condition that takes from the state serves waiters in the order they came")
    func firstComeFirstServed() async {
        // The order is recorded where it is decided, under the lock: once resumed, the
        // waiters run in any order.
        let permits = AsyncCondition((free: 0, served: [Int]()))
        var tasks: [Task<Void, Never>] = []
        for index in 0..<5 {
            tasks.append(Task {
                _ = await permits.wait { (state: inout (free: Int, served: [Int])) -> Bool? in
                    guard state.free > 0 else { return nil }
                    state.free -= 1
                    state.served.append(index)
                    return true
                }
            })
            while permits.waiting < index + 1 { await Task.yield() }
        }
        for _ in 0..<5 { permits.withLock { $0.free += 1 } }
        for task in tasks { await task.value }
        #expect(permits.read { $0.served } == [0, 1, 2, 3, 4])
        #expect(permits.read { $0.free } == 0, "each took one")
    }

    @Test("a wait ends with nil at its time-out, and leaves nothing behind")
    func timeout() async {
        let condition = AsyncCondition(0)
        let value = await condition.wait(timeout: .milliseconds(20)) { (value: inout Int) -> Int? in value > 0 ? value : nil }
        #expect(value == nil)
        #expect(condition.waiting == 0)
        condition.withLock { $0 = 1 }
        #expect(await condition.wait(timeout: .seconds(5)) { (value: inout Int) -> Int? in value > 0 ? value : nil } == 1)
    }

    @Test("a cancelled wait ends with nil")
    func cancellation() async {
        let condition = AsyncCondition(false)
        let waiter = Task { await condition.wait { $0 } }
        while condition.waiting == 0 { await Task.yield() }
        waiter.cancel()
        #expect(await waiter.value == false)
        #expect(condition.waiting == 0)
        // Cancelled before it even started waiting: nil too.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await condition.wait { $0 }
        }
        #expect(await early.value == false)
    }

    @Test("a wait that ignores cancellation goes on after its task is cancelled and returns the value")
    func ignoringCancellation() async {
        let condition = AsyncCondition<Int?>(nil)
        let waiter = Task { await condition.waitIgnoringCancellation { $0 } }
        while condition.waiting == 0 { await Task.yield() }
        waiter.cancel()
        // Still waiting: a cancellable wait would have ended by now (see above).
        for _ in 0..<100 { await Task.yield() }
        #expect(condition.waiting == 1)
        condition.withLock { $0 = 42 }
        #expect(await waiter.value == 42)
        // Cancelled before it started, with the value there already: returns it at once.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await condition.waitIgnoringCancellation { $0 }
        }
        #expect(await early.value == 42)
    }
}
