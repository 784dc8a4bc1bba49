import ChildProcesses
import Foundation
import IMGateway
import IMTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `imbench chaos` for a minute, with the seed `make test` always uses: two imgw on one
/// PostgreSQL archive and one mosquitto, kills, stops, cuts and stalls, alone and overlapping;
/// imbench checks every promise and says so in its exit status and JSON. (The checker's own
/// tests are imbenchTests'; `make chaos` runs ten minutes.) Run alone by `make test`: it loads
/// both cores.
@Suite("The chaos run", .stopsWhatItStarts, .timeLimit(.minutes(8)))
struct ChaosRunTests {
    static let seed = "20261127"

    @Test("60 s under the nemesis (seed 20261127): nothing ACKed lost, duplicated, unexpected or reordered, every message answered, every device back within 5 s")
    func minute() async throws {
        let process = try ChildProcess(executable: IMBenchTests.executable, arguments: ["chaos", "--seconds", "60", "--seed", Self.seed])
        // SIGTERM first: imbench then stops the cluster it started (SIGKILL would orphan it).
        TestResources.track {
            guard !process.hasExited else { return }
            process.signal(SIGTERM)
            let killer = Task {
                try await Task.sleep(for: .seconds(20))
                process.signal(SIGKILL)
            }
            await process.waitForExit()
            killer.cancel()
        }
        var lines: [String] = []
        for await line in process.lines { lines.append(line) }
        let status = await process.waitForExit()
        let output = lines.joined(separator: "\n")
        #expect(status == 0, "imbench chaos failed (wait status \(status)):\n\(output.suffix(8000))")
        let result = try IMBenchTests.json(output)
        #expect(result["passed"] as? Bool == true)
        for anomaly in ["lost", "duplicated", "unexpected", "reordered", "unanswered", "recoveries_over_bound", "gateway_crashes"] {
            #expect(result[anomaly] as? Int == 0, "\(anomaly): \(result[anomaly] ?? "missing")")
        }
        // It did what it says: chat flowed, faults came, devices came back from them. How much
        // flowed is no promise: each device waits for a send's answer before the next, and the
        // answers wait out the faults, so the count follows the machine's speed (about 1,300 of
        // the nominal 3,000 here, 975 on a slower CI runner). The floor says only that chat
        // went on through the minute, with every device's copies delivered.
        #expect((result["acked"] as? Int ?? 0) >= 100)
        #expect((result["deliveries_owed"] as? Int ?? 0) > (result["acked"] as? Int ?? 0))
        #expect((result["faults_scheduled"] as? Int ?? 0) >= 10)
        #expect((result["recoveries"] as? Int ?? 0) > 0)
        #expect(result["deliveries_made"] as? Int == result["deliveries_owed"] as? Int)
    }
}
