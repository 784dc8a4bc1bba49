import Foundation
import IMClient
import Synchronization

/// A position given on the command line or read from stdin: latitude and longitude in degrees.
struct Position: Sendable, Hashable {
    var lat: Double
    var lon: Double

    /// The position checked: latitude -90...90, longitude -180...180.
    init(lat: Double, lon: Double) throws(PositionError) {
        guard (-90...90).contains(lat) else { throw PositionError("latitude \(lat) is not in -90...90") }
        guard (-180...180).contains(lon) else { throw PositionError("longitude \(lon) is not in -180...180") }
        self.lat = lat
        self.lon = lon
    }

    /// `LAT LON` or `LAT,LON` (spaces around the comma allowed).
    init(parsing line: Substring) throws(PositionError) {
        let parts = line.split(whereSeparator: { $0 == "," || $0.isWhitespace })
        guard parts.count == 2, let lat = Double(parts[0]), let lon = Double(parts[1]) else {
            throw PositionError(#"expected "LAT LON" or "LAT,LON" in degrees, got "\#(line)""#)
        }
        try self.init(lat: lat, lon: lon)
    }

    /// The fix to send, timed now.
    var fixNow: IMLocation {
        IMLocation(lat: lat, lon: lon, tst: UInt64(Date().timeIntervalSince1970))
    }

    /// The positions on standard input, one per line, read on a thread of their own. Lines
    /// that are not a position are reported on stderr and skipped; blank lines are ignored.
    /// When the reader is behind, only the newest position waits (locations are a stream);
    /// how many were dropped is reported at the end of the input.
    static func standardInput(_ output: Output) -> AsyncStream<Position> {
        let (positions, sink) = AsyncStream.makeStream(of: Position.self, bufferingPolicy: .bufferingNewest(1))
        Thread.detachNewThread {
            var number = 0
            var dropped = 0
            while let line = readLine() {
                number += 1
                let text = line.trimmingCharacters(in: .whitespaces)
                guard !text.isEmpty else { continue }
                do {
                    if case .dropped = sink.yield(try Position(parsing: Substring(text))) { dropped += 1 }
                } catch {
                    output.status("stdin line \(number): \(error); skipped")
                }
            }
            if dropped > 0 {
                output.status("note: \(dropped) position\(dropped == 1 ? "" : "s") skipped: they came faster than the gateway accepts (location.max_updates_per_second)")
            }
            sink.finish()
        }
        return positions
    }
}

/// Why a position is not one.
struct PositionError: Error, CustomStringConvertible {
    var reason: String
    init(_ reason: String) { self.reason = reason }
    var description: String { reason }
}
