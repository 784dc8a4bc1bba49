import Foundation

/// Unix seconds now, for frame timestamps.
func unixSeconds() -> UInt32 {
    UInt32(truncatingIfNeeded: Int(Date.now.timeIntervalSince1970))
}

/// Unix milliseconds now, for server times.
func unixMilliseconds() -> UInt64 {
    UInt64(Date.now.timeIntervalSince1970 * 1000)
}
