import ArgumentParser
import Foundation

/// Where the broker and the gateway run; by default imbench starts both.
struct EnvironmentOptions: ParsableArguments {
    @Option(help: "Use this MQTT broker (HOST:PORT) instead of starting a mosquitto.")
    var broker: HostPort?

    @Option(help: "The account on --broker, for a broker that refuses anonymous clients (ejabberd): imgw and the raw clients use it.")
    var brokerUsername: String?

    @Option(help: "The password of --broker-username.")
    var brokerPassword: String?

    @Option(help: "The pid of the --broker process, so that its CPU is measured (imbench measures the brokers it starts).")
    var brokerPID: Int32?

    @Option(help: "Use this running imgw (HOST:PORT) instead of starting one; needs --secret and --broker (the broker it uses).")
    var gateway: HostPort?

    @Option(help: "The JWT secret of the gateway given with --gateway.")
    var secret: String?

    @Option(help: "The imgw executable to start (default: the imgw next to imbench).")
    var imgw: String?

    @Option(help: "The message archive of the imgw imbench starts: sqlite (a file in the run's directory; the default), sqlite-full (sync: full), none, or a postgres:// URL.")
    var archive = "sqlite"

    @Option(help: "archive.commit_delay_us (microseconds) of the imgw imbench starts (default: imgw's).")
    var archiveCommitDelayUs: Int?

    @Option(help: "A SQLite archive to start from (a filled one, `imbench history --path`): copied into the run's directory, which the imgw imbench starts then uses.")
    var archiveCopy: String?

    @Option(help: "archive.retention of the imgw imbench starts: 30d, 12h, 90m, 600s, or 0 (keep for ever; default: imgw's).")
    var archiveRetention: String?

    @Option(help: "How the gateway's devices connect: tcp (the TLV listener) or websocket (the same frames over listen.websocket, as browsers).")
    var transport: BenchTransport = .tcp

    @Flag(help: "Copy what mosquitto and imgw print to stderr.")
    var verbose = false

    /// The `archive:` line of the imgw imbench starts, its file in `directory`.
    func archiveLine(in directory: URL) -> String {
        let file = directory.appendingPathComponent("archive.sqlite").path
        let delay = (archiveCommitDelayUs.map { ", commit_delay_us: \($0)" } ?? "") + (archiveRetention.map { ", retention: \($0)" } ?? "")
        switch archive {
        case "none": return "archive: {store: none}"
        case "sqlite-full": return "archive: {path: '\(file)', sync: full\(delay)}"
        case let url where url.hasPrefix("postgres"): return "archive: {url: '\(url)'\(delay)}"
        default: return "archive: {path: '\(file)'\(delay)}"
        }
    }

    func validate() throws {
        if gateway != nil && secret == nil {
            throw ValidationError("--gateway needs --secret (the gateway's auth.jwt_secret) to mint login tokens")
        }
        if gateway != nil && broker == nil {
            throw ValidationError("--gateway needs --broker: the broker that gateway uses (the direct path runs there)")
        }
        if (brokerUsername != nil || brokerPassword != nil || brokerPID != nil) && broker == nil {
            throw ValidationError("--broker-username, --broker-password and --broker-pid are about a --broker")
        }
        if secret != nil && gateway == nil {
            throw ValidationError("--secret is only used with --gateway")
        }
        guard ["sqlite", "sqlite-full", "none"].contains(archive) || archive.hasPrefix("postgres://") || archive.hasPrefix("postgresql://") else {
            throw ValidationError("--archive is sqlite, sqlite-full, none or a postgres:// URL, not \(archive)")
        }
        if let archiveCopy {
            guard archive == "sqlite" || archive == "sqlite-full" else { throw ValidationError("--archive-copy is a SQLite archive: --archive sqlite or sqlite-full") }
            guard FileManager.default.fileExists(atPath: archiveCopy) else { throw ValidationError("--archive-copy: no file \(archiveCopy)") }
        }
        if archiveRetention != nil && archive == "none" { throw ValidationError("--archive-retention needs an archive") }
    }
}

/// How benchmark devices reach the gateway (`--transport`).
enum BenchTransport: String, ExpressibleByArgument, CaseIterable, Sendable {
    case tcp
    case websocket
}
