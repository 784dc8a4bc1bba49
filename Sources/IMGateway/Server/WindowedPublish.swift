import Mosquitto
import Synchronization

/// Publishes started on a session's MQTT loop in their order, at most `window` waiting for
/// the broker at once (libmosquitto keeps the rest in a list it searches at every
/// acknowledgement); each acknowledgement starts the next on the loop itself, so a group's
/// copies cost no task and no thread hop each. (``AsyncSemaphore`` would do the counting,
/// with a task per publish waiting for its permit: what this exists to avoid.)
final class WindowedPublish: Sendable {
    private struct State: Sendable {
        var next = 0
        var unsettled: Int
        /// Each publish's outcome once settled (`nil` inside: the broker has it).
        var outcomes: [MosquittoError?]
    }

    private let publishes: [OutgoingPublish]
    private let window: Int
    private let state: Mutex<State>
    private let completion: @Sendable ([MosquittoError?]) -> Void

    private init(_ publishes: [OutgoingPublish], window: Int, completion: @escaping @Sendable ([MosquittoError?]) -> Void) {
        self.publishes = publishes
        self.window = max(1, window)
        self.completion = completion
        state = Mutex(State(unsettled: publishes.count, outcomes: Array(repeating: nil, count: publishes.count)))
    }

    /// Starts `publishes` on `client`; `completion` gets each one's outcome (`nil`: the broker
    /// has it), in their order, once every one is settled (on the loop thread). A publish that
    /// cannot be handed over fails at once; the others are still tried.
    static func start(
        _ publishes: [OutgoingPublish], window: Int, on client: MosquittoClient,
        completion: @escaping @Sendable ([MosquittoError?]) -> Void
    ) {
        guard !publishes.isEmpty else { return completion([]) }
        let run = WindowedPublish(publishes, window: window, completion: completion)
        client.perform { client in run.fill(on: client) }
    }

    /// ``start(_:window:on:completion:)`` from the client's own loop (no hop).
    static func start(
        _ publishes: [OutgoingPublish], window: Int, onLoopOf client: isolated MosquittoClient,
        completion: @escaping @Sendable ([MosquittoError?]) -> Void
    ) {
        guard !publishes.isEmpty else { return completion([]) }
        WindowedPublish(publishes, window: window, completion: completion).fill(on: client)
    }

    /// Publishes `publishes` on `client`; returns once the broker has every one, or throws the
    /// first failure. Not cancellable: the publishes started complete whatever the caller does.
    static func run(_ publishes: [OutgoingPublish], window: Int, on client: MosquittoClient) async throws {
        let outcomes = await withCheckedContinuation { continuation in
            start(publishes, window: window, on: client) { continuation.resume(returning: $0) }
        }
        if let failure = outcomes.lazy.compactMap({ $0 }).first { throw failure }
    }

    /// Starts publishes while the window has room (on the loop).
    private func fill(on client: isolated MosquittoClient) {
        while let index = state.withLock({ state -> Int? in
            let inFlight = state.next - (publishes.count - state.unsettled)
            guard state.next < publishes.count, inFlight < window else { return nil }
            state.next += 1
            return state.next - 1
        }) {
            do {
                try publishes[index].start(on: client) { [self] outcome in settled(index, outcome, client: client) }
            } catch {
                settled(index, .failure(error as? MosquittoError ?? .closed), client: client)
            }
        }
    }

    /// Publish `index` is done (called on the loop): the next starts, or, with the last, the
    /// completion is told.
    private func settled(_ index: Int, _ outcome: Result<Void, MosquittoError>, client: MosquittoClient) {
        let finished = state.withLock { state -> [MosquittoError?]? in
            state.unsettled -= 1
            if case .failure(let error) = outcome { state.outcomes[index] = error }
            return state.unsettled == 0 ? state.outcomes : nil
        }
        if let finished { return completion(finished) }
        // Completions run on the client's loop thread, inside the client.
        client.assumeIsolated { fill(on: $0) }
    }
}
