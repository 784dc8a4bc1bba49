import Foundation

extension GatewayConfiguration {
    /// `archive`: the message archive. Every chat the gateway accepts is stored before its
    /// sender's ACK, and every device catches up from it at login (docs/OPERATIONS.md, "The
    /// message archive").
    public struct ArchiveSettings: Codable, Sendable, Hashable {
        /// Where messages are kept.
        public enum Store: String, Codable, Sendable, Hashable, CaseIterable {
            /// A SQLite file on this machine (`path`): for one gateway.
            case sqlite
            /// A PostgreSQL database (`url`): for several gateways on one broker or cluster.
            case postgres
            /// No archive: an ACK means the broker has the message, and a device gets only
            /// what the broker kept for it.
            case none
        }

        /// `store`: `sqlite` (the default), `postgres` (the default when `url` is set) or `none`.
        public var store: Store
        /// `path`: the SQLite file. Default `archive.sqlite` beside the embedded broker's
        /// default data directory (``GatewayConfiguration/defaultArchivePath(environment:isRoot:)``).
        public var path: String
        /// `sync`: `normal` (survives a crash of any process; the default) or `full` (an fsync at
        /// every commit: also survives a power loss).
        public var sync: Synchronous

        /// How a SQLite archive's commits reach the disk.
        public enum Synchronous: String, Codable, Sendable, Hashable, CaseIterable {
            /// SQLite's `synchronous = NORMAL` in WAL mode: survives a crash of any process, not
            /// of the machine.
            case normal
            /// `synchronous = FULL`: an fsync at every commit; survives a power loss.
            case full
        }
        /// `url`: `postgres://USER:PASSWORD@HOST:PORT/DATABASE` (`?sslmode=disable|prefer|require`).
        public var url: String?
        /// `retention`: how long messages are kept, in seconds, or with a unit (`30d`, `12h`,
        /// `90m`, `600s`); 0 keeps them for ever. Default 30 days.
        public var retention: Int
        /// `max_per_conversation`: messages kept per conversation in each user's stream at most
        /// (the oldest beyond it are deleted within a minute); 0 (the default): no cap.
        public var maxPerConversation: Int
        /// `max_batch`: messages per transaction at most (group commit). Default 512.
        public var maxBatch: Int
        /// `commit_delay_us`: microseconds the archive's writer, woken by a message, waits for
        /// more to commit with it. Default 500.
        public var commitDelayMicroseconds: Int
        /// `write_timeout`: seconds a commit may take before its messages are refused with
        /// STORE_UNAVAILABLE. Default 5.
        public var writeTimeout: Int
        /// `max_connections`: PostgreSQL connections at most. Default 8.
        public var maxConnections: Int
        /// `cache_mb`: a SQLite archive writer's page cache, in MB (memory is taken as pages are
        /// read, up to this). Default ``defaultCacheMB``.
        public var cacheMB: Int

        /// The default page cache of a SQLite archive's writer, in MB.
        public static let defaultCacheMB = 64

        /// The default retention: 30 days.
        public static let defaultRetention = 30 * 86_400

        /// Creates archive settings with the defaults (SQLite at the default path).
        public init(
            store: Store = .sqlite, path: String = GatewayConfiguration.defaultArchivePath(), sync: Synchronous = .normal,
            url: String? = nil, retention: Int = ArchiveSettings.defaultRetention, maxBatch: Int = 512, commitDelayMicroseconds: Int = 500,
            writeTimeout: Int = 5, maxConnections: Int = 8, maxPerConversation: Int = 0, cacheMB: Int = ArchiveSettings.defaultCacheMB
        ) {
            self.cacheMB = cacheMB
            self.maxPerConversation = maxPerConversation
            self.commitDelayMicroseconds = commitDelayMicroseconds
            self.store = store
            self.path = path
            self.sync = sync
            self.url = url
            self.retention = retention
            self.maxBatch = maxBatch
            self.writeTimeout = writeTimeout
            self.maxConnections = maxConnections
        }

        /// Whether the gateway keeps an archive.
        public var enabled: Bool { store != .none }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case store, path, sync, url, retention
            case maxBatch = "max_batch"
            case commitDelayMicroseconds = "commit_delay_us"
            case writeTimeout = "write_timeout"
            case maxConnections = "max_connections"
            case maxPerConversation = "max_per_conversation"
            case cacheMB = "cache_mb"
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let d = Self()
            self.url = try c.value(.url, or: d.url)
            self.store = try c.value(.store, or: self.url == nil ? d.store : .postgres)
            self.path = try c.optionalPath(.path) ?? d.path
            self.sync = try c.value(.sync, or: d.sync)
            if let seconds = try? c.decodeIfPresent(Int.self, forKey: .retention) {
                self.retention = seconds
            } else if let text = try c.decodeIfPresent(String.self, forKey: .retention) {
                guard let seconds = Self.seconds(text) else {
                    throw GatewayConfigurationError.invalidValue(
                        key: "archive.retention", value: text.debugDescription, reason: "is not a duration (30d, 12h, 90m, 600s or seconds)")
                }
                self.retention = seconds
            } else {
                self.retention = d.retention
            }
            self.maxBatch = try c.value(.maxBatch, or: d.maxBatch)
            self.commitDelayMicroseconds = try c.value(.commitDelayMicroseconds, or: d.commitDelayMicroseconds)
            self.writeTimeout = try c.value(.writeTimeout, or: d.writeTimeout)
            self.maxConnections = try c.value(.maxConnections, or: d.maxConnections)
            self.maxPerConversation = try c.value(.maxPerConversation, or: d.maxPerConversation)
            self.cacheMB = try c.value(.cacheMB, or: d.cacheMB)
        }

        /// Seconds in `30d`, `12h`, `90m`, `600s` or `600`; `nil` for anything else.
        static func seconds(_ text: String) -> Int? {
            let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
            let units: [Character: Int] = ["s": 1, "m": 60, "h": 3_600, "d": 86_400]
            if let last = trimmed.last, let unit = units[last], let value = Int(trimmed.dropLast()), value >= 0 {
                return value.multipliedReportingOverflow(by: unit).overflow ? nil : value * unit
            }
            return Int(trimmed).flatMap { $0 >= 0 ? $0 : nil }
        }
    }

    /// The message archive's default file: `/var/lib/imgw/archive.sqlite` for root, else
    /// `$XDG_STATE_HOME/imgw/archive.sqlite`, else `$HOME/.local/state/imgw/archive.sqlite`
    /// (beside the embedded broker's default data directory).
    public static func defaultArchivePath(
        environment: [String: String] = ProcessInfo.processInfo.environment,
        isRoot: Bool = geteuid() == 0
    ) -> String {
        let broker = defaultDataDirectory(environment: environment, isRoot: isRoot)
        return (broker as NSString).deletingLastPathComponent + "/archive.sqlite"
    }
}
