import Mosquitto
import Synchronization

/// Publishes started on a session's MQTT loop in their order, at most `window` waiting for
/// the broker at once (libmosquitto keeps the rest in a list it searches at every
/// acknowledgement); each acknowledgement starts the next on the loop itself, so a group's
/// copies cost no task and no thread hop each. Resumes its waiter once: when the broker has
/// every publish, or at the first failure (what is in flight then still completes).
final class WindowedPublish: Sendable {
    private struct State {
        var next = 0
        var unsettled: Int
        /// Nil once resumed.
        var waiter: CheckedContinuation<Void, any Error>?
    }

    private let publishes: [OutgoingPublish]
    private let window: Int
    private let state: Mutex<State>

    private init(_ publishes: [OutgoingPublish], window: Int, waiter: CheckedContinuation<Void, any Error>) {
        self.publishes = publishes
        self.window = max(1, window)
        state = Mutex(State(unsettled: publishes.count, waiter: waiter))
    }

    /// Publishes `publishes` on `client`; returns once the broker has every one, or throws
    /// the first failure.
    static func run(_ publishes: [OutgoingPublish], window: Int, on client: MosquittoClient) async throws {
        guard !publishes.isEmpty else { return }
        try await withCheckedThrowingContinuation { (waiter: CheckedContinuation<Void, any Error>) in
            let run = WindowedPublish(publishes, window: window, waiter: waiter)
            client.perform { client in run.fill(on: client) }
        }
    }

    /// Starts publishes while the window has room (on the loop).
    private func fill(on client: isolated MosquittoClient) {
        while let index = state.withLock({ state -> Int? in
            let inFlight = state.next - (publishes.count - state.unsettled)
            guard state.waiter != nil, state.next < publishes.count, inFlight < window else { return nil }
            state.next += 1
            return state.next - 1
        }) {
            do {
                try publishes[index].start(on: client) { [self] outcome in settled(outcome, client: client) }
            } catch {
                settled(.failure(error as? MosquittoError ?? .closed), client: client)
            }
        }
    }

    /// One publish is done (called on the loop): resume the waiter, or start the next.
    private func settled(_ outcome: Result<Void, MosquittoError>, client: MosquittoClient) {
        let finished = state.withLock { state -> (CheckedContinuation<Void, any Error>, Result<Void, any Error>)? in
            state.unsettled -= 1
            guard let waiter = state.waiter else { return nil }
            if case .failure(let error) = outcome {
                state.waiter = nil
                return (waiter, .failure(error))
            }
            guard state.unsettled == 0 else { return nil }
            state.waiter = nil
            return (waiter, .success(()))
        }
        if let (waiter, result) = finished {
            waiter.resume(with: result)
        } else {
            // Completions run on the client's loop thread, inside the client.
            client.assumeIsolated { fill(on: $0) }
        }
    }
}
