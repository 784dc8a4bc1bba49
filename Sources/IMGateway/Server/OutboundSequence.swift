import Synchronization

/// The sequence numbers the gateway puts on frames it sends on one connection (one
/// counter per direction, PROTOCOL.md section 5), shared by the async side and the
/// channel handlers that write error frames themselves.
final class OutboundSequence: Sendable {
    private let counter = Atomic<UInt32>(0)

    /// The next sequence number (1, 2, ...; wraps after 2^32 - 1, skipping 0).
    func next() -> UInt32 {
        let value = counter.wrappingAdd(1, ordering: .relaxed).newValue
        return value == 0 ? counter.wrappingAdd(1, ordering: .relaxed).newValue : value
    }
}

/// Unix seconds now, for frame timestamps.
func unixSeconds() -> UInt32 {
    UInt32(truncatingIfNeeded: Int(Date.now.timeIntervalSince1970))
}

/// Unix milliseconds now, for server times.
func unixMilliseconds() -> UInt64 {
    UInt64(Date.now.timeIntervalSince1970 * 1000)
}

import Foundation
