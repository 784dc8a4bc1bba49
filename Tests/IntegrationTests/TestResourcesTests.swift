import Foundation
import Synchronization
import Testing
import IMTestSupport

/// The support code every integration test relies on to stop what it started.
@Suite("Tests stop what they start", .timeLimit(.minutes(1)))
struct TestResourcesTests {
    struct Thrown: Error {}

    @Test("a test that throws half-way still stops its broker, its gateway process and its devices, newest first")
    func throwingTestStopsEverything() async throws {
        let scope = StopsWhatItStarts()
        let started = Started()
        await #expect(throws: Thrown.self) {
            try await scope.provideScope(for: Test.current!, testCase: Test.Case.current) {
                let broker = try await TestBroker.start()
                let gateway = try await IMGWProcess.start(broker: broker)
                let device = try await TestDevice.connect(port: gateway.port)
                started.set(broker: broker, gateway: gateway, device: device)
                #expect(TestResources.current?.count ?? 0 >= 5)
                throw Thrown()
            }
        }
        let (broker, gateway, device) = try #require(started.value)
        #expect(broker.process.hasExited)
        #expect(gateway.process.hasExited)
        // imgw ended on SIGTERM (a clean exit), not SIGKILL: it was stopped before its broker.
        #expect(await gateway.process.waitForExit() == 0, "imgw's wait status")
        #expect(!device.isActive)
    }

    @Test("outside a tracked test nothing is registered")
    func untracked() async throws {
        #expect(TestResources.current == nil)
        TestResources.track { Issue.record("an untracked stop ran") }
    }

    /// What the scoped body started, for the checks after it.
    final class Started: Sendable {
        private let state = Mutex<(TestBroker, IMGWProcess, TestDevice)?>(nil)
        func set(broker: TestBroker, gateway: IMGWProcess, device: TestDevice) { state.withLock { $0 = (broker, gateway, device) } }
        var value: (TestBroker, IMGWProcess, TestDevice)? { state.withLock { $0 } }
    }
}
