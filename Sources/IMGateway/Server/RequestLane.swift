import Synchronization

/// Runs a connection's slower requests (those that wait for the broker's answer:
/// SUBSCRIBE, presence and location operations, read receipts) one after the other, in
/// the order submitted, on a task that exists only while there is work: an idle
/// connection holds no task (and no task memory).
final class RequestLane: Sendable {
    typealias Job = @Sendable () async -> Void

    private struct State {
        var jobs: [Job] = []
        var running = false
        var closed = false
    }

    private let state = Mutex(State())

    /// Queues `job`; starts the lane's task if it is not running.
    func submit(_ job: @escaping Job) {
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
    func close() {
        state.withLock { state in
            state.closed = true
            state.jobs = []
        }
    }

    private func drain() async {
        while let job = next() { await job() }
    }

    private func next() -> Job? {
        state.withLock { state in
            guard !state.jobs.isEmpty else {
                state.running = false
                return nil
            }
            return state.jobs.removeFirst()
        }
    }
}
