import Foundation
import ArgumentParser
import IMWire

/// `imbench wire`: the TLV codec alone. Encodes and decodes a DELIVERY frame of several
/// body sizes, plain and zlib-compressed (IMWire's ``WireBenchmark``), and reports frames/s
/// and MB/s of wire bytes: a table on stderr, a JSON line on stdout.
struct WireCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wire",
        abstract: "Codec throughput: frames/s and MB/s for encode and decode at several body sizes.")

    @Option(help: "Total seconds, shared by all measurements.")
    var seconds: Double = 6

    @Option(help: "Body sizes in bytes, comma-separated; each is measured plain and zlib-compressed.")
    var sizes = "64,1024,16384,65536"

    func validate() throws {
        guard seconds > 0 else { throw ValidationError("--seconds must be positive") }
        guard !bodySizes.isEmpty, bodySizes.allSatisfy({ (64...1_048_576).contains($0) }) else {
            throw ValidationError("--sizes: comma-separated body sizes from 64 to 1048576")
        }
    }

    private var bodySizes: [Int] {
        sizes.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
    }

    func run() throws {
        let cases = bodySizes.flatMap {
            [WireBenchmark.Case(bodyLength: $0, compressed: false), WireBenchmark.Case(bodyLength: $0, compressed: true)]
        }
        let operations = WireBenchmark.Operation.allCases
        let each = max(0.05, seconds / Double(cases.count * operations.count))
        Log.info("wire: \(cases.count) cases x \(operations.count) operations, \(Int(each * 1000)) ms each")
        let result = try WireBenchmark.run(
            cases: cases, operations: operations, minimumDuration: .milliseconds(Int(each * 1000)))
        Log.info(result.table)

        var json = JSONLine()
        json.add("benchmark", "wire")
        json.add("seconds_per_measurement", each, decimals: 3)
        json.add(
            "results",
            .array(
                result.measurements.map { m in
                    var line = JSONLine()
                    line.add("body_bytes", m.benchmarkCase.bodyLength)
                    line.add("compressed", m.benchmarkCase.compressed)
                    line.add("operation", m.operation.rawValue)
                    line.add("frame_bytes", m.wireBytesPerFrame)
                    line.add("frames_per_s", m.framesPerSecond, decimals: 0)
                    line.add("mb_per_s", m.megabytesPerSecond, decimals: 1)
                    return .object(line)
                }))
        json.print()
    }
}
