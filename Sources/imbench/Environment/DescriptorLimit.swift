#if canImport(Glibc)
import Glibc
#endif

/// The descriptor limit of this process (children inherit it).
enum DescriptorLimit {
    /// Raises the soft RLIMIT_NOFILE to the hard limit; returns the new soft limit.
    @discardableResult
    static func raiseToHardLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return -1 }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        return Int(clamping: limit.rlim_cur)
    }
}
