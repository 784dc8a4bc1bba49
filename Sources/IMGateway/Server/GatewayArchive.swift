import IMArchive
import IMGatewayConfig
import Logging

/// Opens the message archive the configuration names (`archive`).
enum GatewayArchive {
    /// The archive of `settings`, opened (its file created, or its tables), or `nil` for
    /// `store: none`. Throws ``GatewayError/archiveFailed(_:)`` saying why it cannot be used.
    static func open(_ settings: GatewayConfiguration.ArchiveSettings, logger: Logger) async throws(GatewayError) -> MessageArchive? {
        let store: any ArchiveStore
        do throws(ArchiveError) {
            switch settings.store {
            case .none:
                return nil
            case .sqlite:
                store = try SQLiteArchiveStore.open(
                    path: settings.path, synchronous: settings.sync == .full ? .full : .normal, cacheKiB: settings.cacheMB * 1024)
            case .postgres:
                guard let url = settings.url else { throw ArchiveError(.misconfigured, "archive.url is not set") }
                store = try await PostgresArchiveStore.open(url: url, maxConnections: settings.maxConnections, logger: logger)
            }
        } catch {
            throw .archiveFailed("\(error)")
        }
        var metadata: Logger.Metadata = ["archive": "\(store.description)", "epoch": "\(store.epoch)"]
        if settings.store == .sqlite {
            metadata["sync"] = "\(settings.sync.rawValue)"
            metadata["cache-mb"] = "\(settings.cacheMB)"
        }
        metadata["retention"] = "\(settings.retention > 0 ? "\(settings.retention / 86_400) d" : "for ever")"
        logger.info("message archive open", metadata: metadata)
        return MessageArchive(store: store, settings: settings.archiveSettings, logger: logger)
    }
}

extension GatewayConfiguration.ArchiveSettings {
    /// What ``MessageArchive`` is told.
    public var archiveSettings: MessageArchive.Settings {
        MessageArchive.Settings(
            maxBatch: maxBatch, commitDelay: .microseconds(commitDelayMicroseconds), writeTimeout: .seconds(writeTimeout),
            retention: retention > 0 ? .seconds(retention) : nil, maxPerConversation: maxPerConversation > 0 ? maxPerConversation : nil)
    }
}

extension GatewayConfiguration {
    /// ``validate()``, and the PostgreSQL URL's syntax (`archive.url`), which only the
    /// archive's own parser knows: what `imgw` checks a configuration with.
    public func validateForGateway() throws(GatewayConfigurationError) {
        var problems = self.problems()
        if archive.store == .postgres, let url = archive.url {
            do throws(ArchiveError) { _ = try PostgresURL(url) } catch {
                problems.append(.invalidValue(key: "archive.url", value: PostgresURL.redact(url).debugDescription, reason: "is not a PostgreSQL URL: \(error.message)"))
            }
        }
        guard problems.isEmpty else { throw .invalid(problems) }
    }
}
