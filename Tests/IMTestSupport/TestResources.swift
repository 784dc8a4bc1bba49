import Synchronization
import Testing

/// What one test started (brokers, gateways, devices, clients, child processes), so that
/// the test stops all of it when it ends, whether it returned, failed an expectation or
/// threw half-way.
///
/// The support code registers everything it starts with ``track(_:)``; the
/// ``Trait/stopsWhatItStarts`` trait gives each test case its own set and, after the test
/// body, runs every stop in the reverse order of starting (clients before the gateways
/// they talk to, gateways before their broker) and awaits each. Stops are the same ones
/// a test calls itself and must be harmless when the test already called them.
package final class TestResources: Sendable {
    /// The set of the test case running in this task (inherited by its child tasks and by
    /// the unstructured tasks it creates).
    @TaskLocal package static var current: TestResources?

    private let stops = Mutex<[@Sendable () async -> Void]>([])

    /// Registers `stop` with the running test; outside a tracked test it does nothing (the
    /// resource's own `deinit` is then all there is).
    package static func track(_ stop: @escaping @Sendable () async -> Void) {
        current?.stops.withLock { $0.append(stop) }
    }

    /// How many stops are registered and not yet run.
    package var count: Int { stops.withLock { $0.count } }

    /// Runs every registered stop, newest first, including any registered while stopping.
    package func stopAll() async {
        while let stop = stops.withLock({ $0.popLast() }) {
            await stop()
        }
    }
}

/// Gives every test case its own ``TestResources`` and stops what it registered when the
/// test case ends.
package struct StopsWhatItStarts: SuiteTrait, TestTrait, TestScoping {
    package var isRecursive: Bool { true }

    package init() {}

    package func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let resources = TestResources()
        do {
            try await TestResources.$current.withValue(resources) { try await function() }
        } catch {
            await resources.stopAll()
            throw error
        }
        await resources.stopAll()
    }
}

package extension Trait where Self == StopsWhatItStarts {
    /// Every test case stops all that it started (see ``TestResources``), even when it throws.
    package static var stopsWhatItStarts: Self { StopsWhatItStarts() }
}
