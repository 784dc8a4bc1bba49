import ChildProcesses
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// The mosquitto `imgw` starts when no broker is configured: its configuration is
/// written into the data directory (persistence there too), it listens on loopback, and
/// it is restarted if it dies. Stopped last on shutdown (SIGTERM: it saves its sessions).
///
/// It refuses anonymous clients: the gateway connects with an account of its own, and a
/// read-only observer account exists for `mosquitto_sub` (``BrokerCredentials``, enforced by
/// mosquitto's dynamic security plugin).
public final class EmbeddedBroker: Service, Sendable {
    public let endpoint: BrokerEndpoint
    /// The accounts (passwords in the data directory, mode 0600).
    public let credentials: BrokerCredentials
    private let settings: GatewayConfiguration.EmbeddedBrokerSettings
    private let topicPrefix: String
    /// mosquitto's dynamic security plugin, or nil when none was found (start fails).
    private let securityPlugin: String?
    private let logger: Logger
    private let current = Mutex<ChildProcess?>(nil)
    private let stopping = Atomic<Bool>(false)

    /// Prepares the broker: creates the data directory and the accounts' passwords (kept
    /// from the first start on).
    public init(settings: GatewayConfiguration.EmbeddedBrokerSettings, topicPrefix: String, logger: Logger) throws(GatewayError) {
        self.settings = settings
        self.topicPrefix = topicPrefix
        self.credentials = try BrokerCredentials.loadOrCreate(in: settings.dataDir)
        self.endpoint = BrokerEndpoint(
            host: settings.host, port: settings.port, username: BrokerCredentials.gatewayUsername,
            password: credentials.gatewayPassword)
        self.securityPlugin = Self.findSecurityPlugin()
        var logger = logger
        logger[metadataKey: "component"] = "embedded-broker"
        self.logger = logger
    }

    /// Where Debian, Ubuntu and the usual builds put mosquitto's dynamic security plugin.
    public static func findSecurityPlugin() -> String? {
        var machine = utsname()
        uname(&machine)
        let architecture = withUnsafeBytes(of: &machine.machine) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
        let name = "mosquitto_dynamic_security.so"
        let candidates = [
            "/usr/lib/\(architecture)-linux-gnu/\(name)", "/usr/lib/\(name)", "/usr/lib64/\(name)", "/usr/local/lib/\(name)",
            "/usr/lib/mosquitto/\(name)",
        ]
        return candidates.first { FileManager.default.isReadableFile(atPath: $0) }
    }

    /// The `mosquitto_sub` command that shows what travels on the broker, with the
    /// observer's credentials.
    public var observerCommand: String {
        credentials.observerCommand(host: settings.host, port: settings.port, prefix: topicPrefix)
    }

    /// The mosquitto.conf written for it.
    public func configurationText() -> String {
        var lines = [
            "# Written by imgw at each start; edit the imgw configuration instead.",
            "listener \(settings.port) \(settings.host)",
            // Accounts and access: imgw's BrokerCredentials, in the dynamic security plugin.
            "allow_anonymous false",
            "per_listener_settings false",
            "plugin \(securityPlugin ?? "mosquitto_dynamic_security.so")",
            "plugin_opt_config_file \(credentials.dynamicSecurityFile)",
            "max_queued_messages \(settings.maxQueuedMessages)",
            "persistence true",
            "persistence_location \(settings.dataDir.hasSuffix("/") ? settings.dataDir : settings.dataDir + "/")",
            "autosave_interval 60",
            "pid_file \(pidFile)",
            // stderr: unbuffered, so imgw sees "running" at once.
            "log_dest stderr",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages false",
            // Latency: without it mosquitto's small writes (PUBACKs, deliveries) wait for
            // Nagle's algorithm (docs/PERFORMANCE.md has the measurement).
            "set_tcp_nodelay true",
        ]
        if geteuid() == 0 { lines.append("user root") }
        return lines.joined(separator: "\n") + "\n"
    }

    private var pidFile: String { (settings.dataDir as NSString).appendingPathComponent("mosquitto.pid") }

    /// A broker left running by an imgw that was killed (-9) still holds the port and the
    /// data directory: stop it (SIGTERM, it saves its sessions) before starting ours.
    private func stopStaleBroker() async {
        guard let text = try? String(contentsOfFile: pidFile, encoding: .utf8),
              let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)), pid > 0,
              let cmdline = try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8),
              cmdline.contains("mosquitto"), cmdline.contains(settings.dataDir)
        else { return }
        logger.notice("stopping a broker left behind by an earlier imgw", metadata: ["pid": "\(pid)"])
        kill(pid, SIGTERM)
        for _ in 0..<100 where Self.isRunning(pid) {
            try? await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Whether `pid` is a live process. A zombie is not: the orphaned broker's new parent
    /// may never reap it (a container whose init does not), and it holds no port.
    private static func isRunning(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")")
        else { return false }
        let state = stat[stat.index(after: close)...].drop(while: { $0 == " " }).first
        return state != "Z" && state != "X"
    }

    /// Starts mosquitto and returns once it is running (or throws with what it said).
    public func start() async throws {
        try FileManager.default.createDirectory(atPath: settings.dataDir, withIntermediateDirectories: true)
        guard securityPlugin != nil else {
            throw GatewayError.embeddedBrokerFailed(
                "mosquitto's dynamic security plugin (mosquitto_dynamic_security.so, mosquitto 2.0 or later) is not installed: apt-get install mosquitto")
        }
        try credentials.writeDynamicSecurity(prefix: topicPrefix)
        await stopStaleBroker()
        let configPath = (settings.dataDir as NSString).appendingPathComponent("mosquitto.conf")
        try configurationText().write(toFile: configPath, atomically: true, encoding: .utf8)
        let process: ChildProcess
        do {
            // SIGTERM when imgw ends, however it ends: mosquitto then saves its sessions and exits.
            process = try ChildProcess(executable: settings.executable, arguments: ["-c", configPath], parentDeathSignal: SIGTERM)
        } catch {
            throw GatewayError.embeddedBrokerFailed("cannot run \(settings.executable): \(error) (apt-get install mosquitto)")
        }
        current.withLock { $0 = process }
        var said: [String] = []
        var lines = process.lines.makeAsyncIterator()
        while let line = await lines.next() {
            logger.info("\(line)")
            said.append(line)
            if line.contains(" running") {
                logger.info("embedded broker up", metadata: ["endpoint": "\(endpoint)", "data": "\(settings.dataDir)"])
                logger.notice("watch the broker with: \(observerCommand)")
                // Keep logging what it says.
                let logger = self.logger
                let rest = process.lines
                Task { for await line in rest { logger.info("\(line)") } }
                return
            }
        }
        throw GatewayError.embeddedBrokerFailed(said.suffix(5).joined(separator: " | "))
    }

    /// Supervises the broker until graceful shutdown, then stops it.
    public func run() async throws {
        var backoff = RetryBackoff()
        try await withGracefulShutdownHandler {
            while !stopping.load(ordering: .relaxed) {
                let process = current.withLock { $0 }
                let since = ContinuousClock.now
                if let process {
                    await process.waitForExit()
                }
                if stopping.load(ordering: .relaxed) || Task.isCancelled { break }
                // A broker that ran for a while before dying restarts quickly again; one
                // that keeps dying waits longer each time (up to 30 s).
                if ContinuousClock.now - since > .seconds(60) { backoff.succeeded() }
                let delay = backoff.failed()
                logger.error("embedded broker exited; restarting", metadata: ["in": "\(delay)"])
                try await Task.sleep(for: delay)
                do { try await start() } catch { logger.error("restart failed", metadata: ["error": "\(error)"]) }
            }
        } onGracefulShutdown: {
            self.stop()
        }
    }

    /// SIGTERM (mosquitto saves its persistent sessions on the way out).
    public func stop() {
        stopping.store(true, ordering: .relaxed)
        current.withLock { $0 }?.signal(SIGTERM)
    }

}
