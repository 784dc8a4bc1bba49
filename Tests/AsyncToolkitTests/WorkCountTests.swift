import Synchronization
import Testing

@testable import AsyncToolkit

/// `AsyncCondition<Int>` as a count of work under way (`enter`, `leave`, `waitUntilZero`):
/// what shutdown waits on for connections and chats.
@Suite("AsyncCondition as a count of work", .timeLimit(.minutes(1)))
struct WorkCountTests {
    /// Waiters that call `waitUntilZero()` and count their return.
    final class Waiters: Sendable {
        let started = Atomic<Int>(0)
        let resumed = Atomic<Int>(0)
    }

    /// Starts `count` tasks waiting for `tracker` to be idle and returns once each has
    /// started (and so is about to call, or is in, `waitUntilZero()`).
    static func startWaiters(_ count: Int, on tracker: AsyncCondition<Int>, counting waiters: Waiters) async -> [Task<Void, Never>] {
        let (started, startedSink) = AsyncStream.makeStream(of: Void.self)
        let tasks = (0..<count).map { _ in
            Task {
                waiters.started.wrappingAdd(1, ordering: .sequentiallyConsistent)
                startedSink.yield()
                await tracker.waitUntilZero()
                waiters.resumed.wrappingAdd(1, ordering: .sequentiallyConsistent)
            }
        }
        var seen = 0
        for await _ in started {
            seen += 1
            if seen == count { break }
        }
        return tasks
    }

    /// A waiter that returned early could only be seen by watching for a while: this is
    /// that while (it checks that something did not happen; nothing waits on it).
    static func settle() async {
        try? await Task.sleep(for: .milliseconds(100))
    }

    @Test("waitUntilZero returns at once when no connection is live")
    func idleReturnsAtOnce() async {
        let tracker = AsyncCondition(0)
        #expect(tracker.read { $0 } == 0)
        await tracker.waitUntilZero()
        tracker.enter()
        tracker.leave()
        await tracker.waitUntilZero()
        #expect(tracker.read { $0 } == 0)
    }

    @Test("live counts the connections entered and not yet left")
    func liveCounts() {
        let tracker = AsyncCondition(0)
        tracker.enter()
        tracker.enter()
        tracker.enter()
        #expect(tracker.read { $0 } == 3)
        tracker.leave()
        #expect(tracker.read { $0 } == 2)
        tracker.enter()
        #expect(tracker.read { $0 } == 3)
        tracker.leave()
        tracker.leave()
        tracker.leave()
        #expect(tracker.read { $0 } == 0)
    }

    @Test("waitUntilZero waits while connections are live; every waiter resumes at the last leave")
    func waitsForLastLeave() async {
        let tracker = AsyncCondition(0)
        let waiters = Waiters()
        tracker.enter()
        tracker.enter()
        let tasks = await Self.startWaiters(3, on: tracker, counting: waiters)
        await Self.settle()
        #expect(waiters.resumed.load(ordering: .sequentiallyConsistent) == 0, "returned while two connections were live")

        tracker.leave()
        #expect(tracker.read { $0 } == 1)
        await Self.settle()
        #expect(waiters.resumed.load(ordering: .sequentiallyConsistent) == 0, "returned while a connection was still live")

        tracker.leave()
        for task in tasks { await task.value }  // the suite's time limit bounds this
        #expect(waiters.resumed.load(ordering: .sequentiallyConsistent) == 3)
        #expect(tracker.read { $0 } == 0)
    }

    @Test("after going idle the tracker can be waited on again")
    func waitsAgainAfterIdle() async {
        let tracker = AsyncCondition(0)
        let first = Waiters()
        tracker.enter()
        let firstTasks = await Self.startWaiters(2, on: tracker, counting: first)
        tracker.leave()
        for task in firstTasks { await task.value }
        #expect(first.resumed.load(ordering: .sequentiallyConsistent) == 2)

        let second = Waiters()
        tracker.enter()
        let secondTasks = await Self.startWaiters(2, on: tracker, counting: second)
        await Self.settle()
        #expect(second.resumed.load(ordering: .sequentiallyConsistent) == 0, "returned while a new connection was live")
        tracker.leave()
        for task in secondTasks { await task.value }
        #expect(second.resumed.load(ordering: .sequentiallyConsistent) == 2)
    }
}
