/// Runs an action at a deadline unless cancelled first: for work that must not outlive its
/// time, where the action makes it end (closing what it waits on).
public final class Watchdog: Sendable {
    private let task: Task<Void, Never>

    /// Arms it: `action` runs at `deadline` unless ``cancel()`` comes first.
    public init(until deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () async -> Void) {
        task = Task {
            guard (try? await Task.sleep(until: deadline, clock: .continuous)) != nil else { return }
            await action()
        }
    }

    /// Disarms it (an action already running goes on).
    public func cancel() {
        task.cancel()
    }

    /// Waits until the action has run, or the watchdog was cancelled.
    public func settled() async {
        await task.value
    }
}
