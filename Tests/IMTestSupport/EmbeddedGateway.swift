import ChildProcesses
import Foundation
import IMGateway
import IMWire
import Logging
import Mosquitto
import NIOCore
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// An imgw process with its embedded broker, its output as lines.
package final class EmbeddedGateway: Sendable {
    /// The MQTT keepalive its configuration sets, in seconds.
    package static let keepalive = 10

    package struct Setup: Sendable {
        package var directory: URL
        package var tlvPort: Int
        package var brokerPort: Int
        package var metricsPort: Int
        /// `push.url`, if any (with ``IMGWProcess/pushSecret``).
        package var push: String? = nil

        package init(directory: URL, tlvPort: Int, brokerPort: Int, metricsPort: Int, push: String? = nil) {
            self.directory = directory
            self.tlvPort = tlvPort
            self.brokerPort = brokerPort
            self.metricsPort = metricsPort
            self.push = push
        }

        package var dataDirectory: String { directory.appendingPathComponent("broker").path }

        /// A setup in a new temporary directory (the caller removes it), on free ports.
        package static func scratch(_ prefix: String = "imgw-embedded") throws -> Setup {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            return Setup(directory: directory, tlvPort: freePort(), brokerPort: freePort(), metricsPort: freePort())
        }

        /// The pid in the broker's pid file.
        package func brokerPID() -> pid_t? {
            (try? String(contentsOfFile: dataDirectory + "/mosquitto.pid", encoding: .utf8))
                .flatMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        }

        /// Kills the broker in the pid file if it is running and is this setup's.
        package func killBroker() {
            guard let pid = brokerPID(),
                  let cmdline = try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8),
                  cmdline.contains(dataDirectory)
            else { return }
            kill(pid, SIGKILL)
        }
    }

    package let process: ChildProcess
    package let lines: Collector<String>
    /// Every line it printed so far.
    private let printed: Printed

    package final class Printed: Sendable {
        package let lines = Mutex<[String]>([])
    }

    private init(process: ChildProcess, lines: Collector<String>, printed: Printed) {
        self.process = process
        self.lines = lines
        self.printed = printed
    }

    /// Every line printed so far.
    package var allPrinted: [String] { printed.lines.withLock { $0 } }

    /// The first line printed so far that contains `marker`.
    package func printedLine(containing marker: String) -> String? {
        printed.lines.withLock { $0.first { $0.contains(marker) } }
    }

    /// Starts imgw and returns once it listens (its broker is up by then).
    package static func start(_ setup: Setup) async throws -> EmbeddedGateway {
        let config = setup.directory.appendingPathComponent("imgw.yaml")
        try """
            auth:
              jwt_secret: \(IMGWProcess.secret)
            broker:
              keepalive: \(Self.keepalive)
            embedded_broker:
              port: \(setup.brokerPort)
              data_dir: \(setup.dataDirectory)
            archive:
              path: \(setup.directory.appendingPathComponent("archive.sqlite").path)
            metrics:
              port: \(setup.metricsPort)
            \(setup.push.map { "push: {url: '\($0)', secret: \(IMGWProcess.pushSecret)}" } ?? "")
            log_level: info
            """.write(to: config, atomically: true, encoding: .utf8)
        let process = try spawn(
            IMGWProcess.executable,
            ["serve", "--config", config.path, "--listen", "127.0.0.1:\(setup.tlvPort)"])
        let (stream, sink) = AsyncStream.makeStream(of: String.self)
        let printed = Printed()
        _ = await process.follow(until: nil, within: .zero) { line in
            printed.lines.withLock { $0.append(line) }
            sink.yield(line)
        }
        let gateway = EmbeddedGateway(process: process, lines: Collector(stream), printed: printed)
        TestResources.track {
            await gateway.stop()
            setup.killBroker()  // one a killed imgw left behind
        }
        do {
            try await gateway.waitFor("listening", "imgw listening")
        } catch {
            await gateway.kill9()
            throw error
        }
        return gateway
    }

    /// Waits for a line of its output that contains `marker`.
    package func waitFor(_ marker: String, _ what: String, within seconds: Double = 15) async throws {
        while try await !lines.next(within: seconds, what).contains(marker) {}
    }

    package func kill9() async {
        await process.end(SIGKILL)
    }

    /// SIGTERM (imgw stops its broker too) and wait.
    package func stop() async {
        await process.end(SIGTERM)
    }

    deinit {
        process.signal(SIGKILL)
    }
}
