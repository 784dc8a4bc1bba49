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
        let permits = AsyncCondition(0)
        let order = AsyncCondition<[Int]>([])
        var tasks: [Task<Void, Never>] = []
        for index in 0..<5 {
            tasks.append(Task {
                _ = await permits.wait { (free: inout Int) -> Bool? in
                    guard free > 0 else { return nil }
                    free -= 1
                    return true
                }
                order.withLock { $0.append(index) }
            })
            while permits.waiting < index + 1 { await Task.yield() }
        }
        for _ in 0..<5 { permits.withLock { $0 += 1 } }
        for task in tasks { await task.value }
        #expect(order.read { $0 } == [0, 1, 2, 3, 4])
        #expect(permits.read { $0 } == 0, "each took one")
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
}

@Suite("Watchdog", .timeLimit(.minutes(1)))
struct WatchdogTests {
    @Test("its action runs at the deadline; a cancelled one never runs")
    func firesUnlessCancelled() async {
        let fired = AsyncCondition(0)
        let watchdog = Watchdog(until: .now + .milliseconds(10)) { fired.withLock { $0 += 1 } }
        await watchdog.settled()
        #expect(fired.read { $0 } == 1)
        let disarmed = Watchdog(until: .now + .seconds(30)) { fired.withLock { $0 += 1 } }
        disarmed.cancel()
        await disarmed.settled()
        #expect(fired.read { $0 } == 1, "cancelled before its deadline: nothing ran")
    }
}
