import Histogram
import IMGateway
import NIOCore

/// Logs in many devices with at most `concurrency` logins in flight (and, with a rate, no
/// more than `rate` started per second): the login storm of `imbench connect`.
struct LoginDriver: Sendable {
    /// Where and how.
    var gateway: HostPort
    /// The WebSocket path, for devices that connect over WebSocket.
    var webSocketPath: String?
    var concurrency: Int
    var rate: Double?
    /// Heartbeat interval for the idle devices; nil: as announced in LOGIN_OK.
    var heartbeat: TimeAmount?

    /// What the storm produced.
    struct Outcome: Sendable {
        var devices: [BenchDevice]
        /// Failure reason → count.
        var failures: [String: Int]
        /// From the first connect to the last LOGIN_OK or failure.
        var seconds: Double
        /// Connect + LOGIN → LOGIN_OK, microseconds.
        var latency: Histogram<UInt64>
    }

    private enum Attempt: Sendable {
        case loggedIn(BenchDevice, micros: UInt64)
        case failed(String)
    }

    /// Logs in one device per token (user `users[i]`, device `bench`), all on `loop`.
    func run(tokens: [String], loop: any EventLoop, counters: ConnectCounters) async -> Outcome {
        var outcome = Outcome(
            devices: [], failures: [:], seconds: 0,
            latency: Histogram(lowestDiscernibleValue: 1, highestTrackableValue: 120_000_000, numberOfSignificantValueDigits: .three))
        let startedAt = MonotonicClock.nanoseconds()
        let heartbeat = self.heartbeat
        let gateway = self.gateway
        let webSocketPath = self.webSocketPath
        await withTaskGroup(of: Attempt.self) { group in
            var inFlight = 0
            func settle(_ attempt: Attempt) {
                switch attempt {
                case .loggedIn(let device, let micros):
                    outcome.devices.append(device)
                    _ = outcome.latency.record(max(1, min(micros, 120_000_000)))
                    counters.loggedIn.add(1, ordering: .relaxed)
                case .failed(let reason):
                    outcome.failures[reason, default: 0] += 1
                    counters.failed.add(1, ordering: .relaxed)
                }
            }
            for (index, token) in tokens.enumerated() {
                if inFlight >= concurrency, let attempt = await group.next() {
                    settle(attempt)
                    inFlight -= 1
                }
                if let rate {
                    let due = startedAt + UInt64(Double(index) / rate * 1e9)
                    let now = MonotonicClock.nanoseconds()
                    if due > now { try? await Task.sleep(for: .nanoseconds(Int64(due - now))) }
                }
                inFlight += 1
                group.addTask {
                    let begin = MonotonicClock.nanoseconds()
                    do {
                        let device = try await BenchDevice.connect(
                            to: gateway, webSocketPath: webSocketPath, on: loop, token: token, deviceID: "bench", timeout: .seconds(30),
                            behaviour: { IdleDevice(counters: counters, interval: heartbeat) })
                        return .loggedIn(device, micros: (MonotonicClock.nanoseconds() - begin) / 1000)
                    } catch {
                        return .failed(Self.reason(error))
                    }
                }
            }
            for await attempt in group { settle(attempt) }
        }
        outcome.seconds = MonotonicClock.seconds(since: startedAt)
        return outcome
    }

    /// A failure, shortened so that equal causes group together.
    private static func reason(_ error: any Error) -> String {
        let text = "\(error)"
        return text.count > 80 ? String(text.prefix(80)) + "..." : text
    }
}
