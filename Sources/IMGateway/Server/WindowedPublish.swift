import AsyncToolkit
import Mosquitto

/// Publishes started on a session's MQTT loop in their order, at most `window` waiting for
/// the broker at once (libmosquitto keeps the rest in a list it searches at every
/// acknowledgement); each acknowledgement starts the next on the loop itself, so a group's
/// copies cost no task and no thread hop each. Its caller returns once: when the broker has
/// every publish, or at the first failure (what is in flight then still completes).
final class WindowedPublish: Sendable {
    private struct State: Sendable {
        var next = 0
        var unsettled: Int
        /// The first failure: nothing more starts.
        var failure: MosquittoError?
    }

    private let publishes: [OutgoingPublish]
    private let window: Int
    private let state: AsyncCondition<State>

    private init(_ publishes: [OutgoingPublish], window: Int) {
        self.publishes = publishes
        self.window = max(1, window)
        state = AsyncCondition(State(unsettled: publishes.count))
    }

    /// Publishes `publishes` on `client`; returns once the broker has every one, or throws
    /// the first failure.
    static func run(_ publishes: [OutgoingPublish], window: Int, on client: MosquittoClient) async throws {
        guard !publishes.isEmpty else { return }
        let run = WindowedPublish(publishes, window: window)
        client.perform { client in run.fill(on: client) }
        // Not cancellable: the publishes started complete whatever the caller does.
        let outcome = await Task { [state = run.state] in
            await state.wait { (state: inout State) -> Result<Void, MosquittoError>? in
                if let failure = state.failure { return .failure(failure) }
                return state.unsettled == 0 ? .success(()) : nil
            }
        }.value
        try outcome?.get()
    }

    /// Starts publishes while the window has room (on the loop).
    private func fill(on client: isolated MosquittoClient) {
        while let index = state.withLock({ state -> Int? in
            let inFlight = state.next - (publishes.count - state.unsettled)
            guard state.failure == nil, state.next < publishes.count, inFlight < window else { return nil }
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

    /// One publish is done (called on the loop): the caller returns, or the next starts.
    private func settled(_ outcome: Result<Void, MosquittoError>, client: MosquittoClient) {
        let more = state.withLock { state -> Bool in
            state.unsettled -= 1
            if case .failure(let error) = outcome, state.failure == nil { state.failure = error }
            return state.failure == nil && state.unsettled > 0
        }
        // Completions run on the client's loop thread, inside the client.
        if more { client.assumeIsolated { fill(on: $0) } }
    }
}
