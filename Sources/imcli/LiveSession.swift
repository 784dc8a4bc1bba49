import Foundation
import IMClient
import Synchronization
import UnixSignals

/// A command that stays logged in (listen, presence, location, sub): prints the client's
/// events until the client ends. It is ended by the first SIGINT or SIGTERM (Ctrl-C), by
/// its time limit, or by the command calling ``stop()``: then `ending` runs (it logs out)
/// and the events finish. A second Ctrl-C exits at once (130).
///
/// Across a lost connection the client reconnects on its own: `reconnecting` and
/// `reconnected` are printed as notices and the session goes on. Only the end of the
/// client (`disconnected`: a kick that forbids reconnecting, such as SESSION_TAKEN_OVER)
/// ends it with exit code 3.
final class LiveSession: Sendable {
    let client: IMClient
    let output: Output
    private let ending: @Sendable (IMClient) async -> Void
    private let stopped = Mutex(false)

    init(_ client: IMClient, _ output: Output, ending: @escaping @Sendable (IMClient) async -> Void = { await $0.logout() }) {
        self.client = client
        self.output = output
        self.ending = ending
    }

    /// Ends the session (the first call only): runs `ending` in the background.
    func stop() {
        let first = stopped.withLock { stopped in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        let client = self.client
        Task { await ending(client) }
    }

    /// Prints the events `shown` (notices always) until the events end, calling `observe`
    /// for every event first. Returns the exit code: 0 when the session was stopped, 3 when
    /// the client ended on its own.
    func run(
        for limit: Duration? = nil,
        shown: (IMClient.Event) -> Bool,
        observe: (IMClient.Event) async -> Void = { _ in }
    ) async -> Int32 {
        // SIGINT and SIGTERM (their default handlers replaced for good).
        let interrupts = await UnixSignalsSequence(trapping: .sigint, .sigterm)
        let signals = Task {
            var interrupted = false
            for await _ in interrupts {
                if interrupted { exit(130) }
                interrupted = true
                self.stop()
            }
        }
        let timer = limit.map { limit in
            Task {
                try await Task.sleep(for: limit)
                self.stop()
            }
        }
        defer {
            signals.cancel()
            timer?.cancel()
        }
        var exitCode: Int32 = 0
        for await event in client.events {
            await observe(event)
            if Output.isNotice(event) || shown(event) { output.event(event) }
            if case .disconnected = event { exitCode = CLIFailure.connection }
        }
        return exitCode
    }
}
