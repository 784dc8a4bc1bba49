/// Why the archive did not do what was asked. A struct with a ``Code``, as postgres-nio's
/// `PSQLError`, so that a new kind of failure breaks no caller.
public struct ArchiveError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of failure.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: Sendable, Hashable {
            case unavailable, corrupt, misconfigured, closed
        }

        private let base: Base

        /// The store cannot take or give messages now (disk full or unwritable, the database
        /// down, slow or unreachable, a write that took too long); try again after
        /// ``ArchiveError/retryAfter``.
        public static let unavailable = Code(base: .unavailable)
        /// The store holds something the archive cannot read (another program's file, a
        /// schema from a newer imgw).
        public static let corrupt = Code(base: .corrupt)
        /// The settings cannot work (a path that cannot be created, a URL that is not one).
        public static let misconfigured = Code(base: .misconfigured)
        /// The archive was closed.
        public static let closed = Code(base: .closed)

        public var description: String {
            switch base {
            case .unavailable: "unavailable"
            case .corrupt: "corrupt"
            case .misconfigured: "misconfigured"
            case .closed: "closed"
            }
        }
    }

    /// The kind.
    public var code: Code
    /// What happened, for a log line or an error frame.
    public var message: String
    /// For ``Code/unavailable``: how long to wait before trying again, in milliseconds.
    public var retryAfter: UInt32?

    /// An error.
    public init(_ code: Code, _ message: String, retryAfter: UInt32? = nil) {
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
    }

    /// The store cannot take messages now; try again after `retryAfter` milliseconds.
    public static func unavailable(_ message: String, retryAfter: UInt32) -> ArchiveError {
        ArchiveError(.unavailable, message, retryAfter: retryAfter)
    }

    public var description: String {
        if let retryAfter { return "\(message) (retry in \(retryAfter) ms)" }
        return message
    }
}
