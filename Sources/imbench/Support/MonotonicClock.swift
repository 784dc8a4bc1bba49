#if canImport(Glibc)
import Glibc
#endif

/// CLOCK_MONOTONIC of this process: the send timestamps carried inside benchmark messages
/// (sender and receiver are in the same process, so receive − send is the one-way latency).
enum MonotonicClock {
    /// Nanoseconds since an arbitrary point (boot).
    @inline(__always)
    static func nanoseconds() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) &* 1_000_000_000 &+ UInt64(spec.tv_nsec)
    }

    /// Seconds (fractional) since `start`, a value of ``nanoseconds()``.
    static func seconds(since start: UInt64) -> Double {
        Double(nanoseconds() &- start) / 1e9
    }

    /// Unix seconds, for frame header timestamps (informational only).
    static func unixSeconds() -> UInt32 {
        UInt32(truncatingIfNeeded: time(nil))
    }
}
