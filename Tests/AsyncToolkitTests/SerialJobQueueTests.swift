import Synchronization
import Testing

@testable import AsyncToolkit

@Suite("SerialJobQueue", .timeLimit(.minutes(1)))
struct SerialJobQueueTests {
    /// What jobs did, in order, with a bounded wait for a number of entries.
    final class Log: Sendable {
        private struct Waiter {
            var id: Int
            var count: Int
            var continuation: CheckedContinuation<Bool, Never>
        }

        private struct State {
            var entries: [String] = []
            var waiters: [Waiter] = []
            var nextID = 0
        }

        private let state = Mutex(State())

        func record(_ entry: String) {
            let ready = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
                state.entries.append(entry)
                let count = state.entries.count
                let ready = state.waiters.filter { $0.count <= count }.map(\.continuation)
                state.waiters.removeAll { $0.count <= count }
                return ready
            }
            for waiter in ready { waiter.resume(returning: true) }
        }

        var entries: [String] { state.withLock { $0.entries } }

        /// Waits until `count` entries were recorded; false when `seconds` passed first.
        func waitForCount(_ count: Int, within seconds: Double = 10) async -> Bool {
            let id = state.withLock { state in
                state.nextID += 1
                return state.nextID
            }
            let timeout = Task {
                guard (try? await Task.sleep(for: .seconds(seconds))) != nil else { return }
                self.expire(id)
            }
            defer { timeout.cancel() }
            return await withCheckedContinuation { continuation in
                let now = state.withLock { state -> Bool in
                    if state.entries.count >= count { return true }
                    state.waiters.append(Waiter(id: id, count: count, continuation: continuation))
                    return false
                }
                if now { continuation.resume(returning: true) }
            }
        }

        private func expire(_ id: Int) {
            let expired = state.withLock { state -> CheckedContinuation<Bool, Never>? in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: index).continuation
            }
            expired?.resume(returning: false)
        }
    }

    /// Opens once; jobs wait on it to stay running while the test does something.
    final class Gate: Sendable {
        private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

        func open() {
            let waiters = state.withLock { state in
                state.open = true
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume() }
        }

        func wait() async {
            await withCheckedContinuation { continuation in
                let open = state.withLock { state in
                    if !state.open { state.waiters.append(continuation) }
                    return state.open
                }
                if open { continuation.resume() }
            }
        }
    }

    /// Waits (bounded) until the caller holds the only reference to `lane`: the lane's task,
    /// which holds it while it runs, has ended.
    static func taskEnded(_ lane: inout SerialJobQueue, within seconds: Double = 10) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while !isKnownUniquelyReferenced(&lane) {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(1))  // polling a condition, not a synchronising sleep
        }
        return true
    }

    @Test("jobs run one at a time, never two at once, in the order submitted")
    func serialInOrder() async {
        let lane = SerialJobQueue()
        let log = Log()
        let running = Atomic<Int>(0)
        let highest = Atomic<Int>(0)
        let count = 40
        for index in 0..<count {
            lane.submit {
                let now = running.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
                _ = highest.max(now, ordering: .sequentiallyConsistent)
                // Suspend inside the job: a lane that ran the next job meanwhile would overlap.
                await Task.yield()
                try? await Task.sleep(for: .milliseconds(1))
                await Task.yield()
                running.wrappingSubtract(1, ordering: .sequentiallyConsistent)
                log.record("\(index)")
            }
        }
        // (Order is the point, not speed: a loaded machine gets a minute.)
        #expect(await log.waitForCount(count, within: 60), "only \(log.entries.count) of \(count) jobs ran")
        #expect(log.entries == (0..<count).map { "\($0)" })
        #expect(highest.load(ordering: .sequentiallyConsistent) == 1, "two jobs ran at once")
        #expect(running.load(ordering: .sequentiallyConsistent) == 0)
    }

    @Test("a job submitted from inside a job runs after the jobs already queued, not inside the current one")
    func submitFromInsideJob() async {
        var lane = SerialJobQueue()
        let log = Log()
        let gate = Gate()
        let inner: SerialJobQueue.Job = { log.record("inner") }
        lane.submit { [lane] in
            log.record("A started")
            await gate.wait()  // B and C get queued meanwhile
            lane.submit(inner)
            await Task.yield()
            try? await Task.sleep(for: .milliseconds(5))
            log.record("A finished")
        }
        lane.submit { log.record("B") }
        lane.submit { log.record("C") }
        gate.open()
        #expect(await log.waitForCount(5), "jobs ran: \(log.entries)")
        #expect(log.entries == ["A started", "A finished", "B", "C", "inner"])
        #expect(await Self.taskEnded(&lane), "the lane's task ends once the queue is empty")
        #expect(log.entries.count == 5, "no job ran twice")
    }

    @Test("after the queue drains the lane's task ends, and a new submit starts it again")
    func restartsAfterDraining() async {
        var lane = SerialJobQueue()
        let log = Log()
        #expect(isKnownUniquelyReferenced(&lane), "a new lane holds no task")
        for round in 1...4 {
            lane.submit { log.record("round \(round) a") }
            lane.submit {
                await Task.yield()
                log.record("round \(round) b")
            }
            #expect(await log.waitForCount(2 * round), "round \(round): the lane did not restart (\(log.entries))")
            #expect(await Self.taskEnded(&lane), "round \(round): the lane's task did not end after draining")
        }
        #expect(log.entries == (1...4).flatMap { ["round \($0) a", "round \($0) b"] })
    }

    @Test("close drops queued jobs that have not started and refuses new ones; the running job finishes")
    func closeDropsQueuedJobs() async {
        var lane = SerialJobQueue()
        let log = Log()
        let gate = Gate()
        lane.submit {
            log.record("A started")
            await gate.wait()
            log.record("A finished")
        }
        lane.submit { log.record("B (queued before close)") }
        lane.submit { log.record("C (queued before close)") }
        #expect(await log.waitForCount(1), "A did not start")
        lane.close()
        lane.submit { log.record("D (submitted after close)") }
        gate.open()
        #expect(await log.waitForCount(2), "the running job must finish after close")
        // Once the task has ended, nothing else can run: absence is certain, not timed.
        #expect(await Self.taskEnded(&lane))
        #expect(log.entries == ["A started", "A finished"])

        // Closed and idle: a submit does not even start a task.
        lane.submit { log.record("E (submitted to an idle closed lane)") }
        #expect(isKnownUniquelyReferenced(&lane), "a closed lane started a task")
        #expect(log.entries == ["A started", "A finished"])
    }
}
