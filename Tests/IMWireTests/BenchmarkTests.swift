import Foundation
import IMWire
import Testing

@Suite("Throughput benchmark")
struct BenchmarkTests {
    /// A quick run proving the benchmark works. With `IMWIRE_BENCHMARK=1` it runs properly and
    /// prints the table (use a release build: `swift test -c release --filter BenchmarkTests`).
    @Test("the benchmark measures every case and operation")
    func runs() throws {
        let full = ProcessInfo.processInfo.environment["IMWIRE_BENCHMARK"] == "1"
        let result = try WireBenchmark.run(minimumDuration: full ? .seconds(1) : .milliseconds(1))
        #expect(result.measurements.count == WireBenchmark.Case.standard.count * WireBenchmark.Operation.allCases.count)
        #expect(result.measurements.allSatisfy { $0.frames > 0 && $0.framesPerSecond > 0 })
        if full { print(result.table) }
    }
}
