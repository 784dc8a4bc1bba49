import Synchronization

/// Runs jobs one after the other, in the order submitted, on a task that exists only while
/// there is work: an idle queue holds no task (and no task memory).
///
/// Hand-written because an `AsyncStream` with a consumer task, the library's way, keeps that
/// task suspended for as long as the queue lives: one per device connection's request lane
/// (`DeviceConnection`), mostly idle, would cost a task's memory per connection.
public final class SerialJobQueue: Sendable {
    public typealias Job = @Sendable () async -> Void

    private struct State {
        var jobs: [Job] = []
        var head = 0
        var running = false
        var closed = false
    }

    private let state = Mutex(State())

    public init() {}

    /// Queues `job`; starts the queue's task if it is not running. Ignored once closed.
    public func submit(_ job: @escaping Job) {
        let start = state.withLock { state -> Bool in
            guard !state.closed else { return false }
            state.jobs.append(job)
            if state.running { return false }
            state.running = true
            return true
        }
        if start { Task { await self.drain() } }
    }

    /// Drops queued jobs and refuses new ones (a job running goes on).
    public func close() {
        state.withLock { state in
            state.closed = true
            state.jobs = []
            state.head = 0
        }
    }

    private func drain() async {
        while let job = next() { await job() }
    }

    private func next() -> Job? {
        state.withLock { state in
            guard state.head < state.jobs.count else {
                state.running = false
                state.jobs.removeAll(keepingCapacity: true)
                state.head = 0
                return nil
            }
            defer { state.head += 1 }
            return state.jobs[state.head]
        }
    }
}
