import ChildProcesses
import Foundation
import IMGateway
import IMTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A gateway started as `make run` starts it (scripts/run-config: random secret and API key,
/// the WebSocket listener in development mode, the console), on free ports, with its embedded
/// broker; then the independent checks in Python: every README and `imcli --help` example
/// (Tests/examples), RFC 6455 conformance of the WebSocket listener, and two browsers, a TCP
/// device and the operator console in headless Chromium (Tests/web; screenshots in
/// .build/test-artifacts). Each script prints one line per case and `N passed, N failed`.
@Suite("make run, browsers and examples", .stopsWhatItStarts, .serialized, .timeLimit(.minutes(6)))
struct WebTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static var python: String { root.appendingPathComponent(".build/web-venv/bin/python").path }
    static var imcli: String { URL(fileURLWithPath: IMGWProcess.executable).deletingLastPathComponent().appendingPathComponent("imcli").path }

    /// A `make run` gateway: its directory (with `run/`), ports and process.
    struct RunGateway {
        let directory: URL
        let tlv: Int, websocket: Int, api: Int, metrics: Int, broker: Int
        let process: ChildProcess
        var config: String { directory.appendingPathComponent("run/imgw.yaml").path }
        var apiKey: String {
            (try? String(contentsOf: directory.appendingPathComponent("run/api.key"), encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        }

        static func start() async throws -> RunGateway {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-makerun-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            TestResources.track { try? FileManager.default.removeItem(at: directory) }
            let (tlv, websocket, api, metrics, broker) = (freePort(), freePort(), freePort(), freePort(), freePort())
            _ = try await run("/usr/bin/env", [
                "RUN_DIR=\(directory.path)/run", "TLV_PORT=\(tlv)", "WS_PORT=\(websocket)", "API_PORT=\(api)", "METRICS_PORT=\(metrics)",
                "BROKER_PORT=\(broker)", root.appendingPathComponent("scripts/run-config").path,
            ])
            for name in ["imgw.yaml", "jwt.secret", "api.key"] {
                let mode = try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent("run/\(name)").path)[.posixPermissions] as? Int
                #expect(mode == 0o600, "run/\(name) is mode 0600")
            }
            let process = try spawn(IMGWProcess.executable, ["serve", "--config", directory.appendingPathComponent("run/imgw.yaml").path], in: directory)
            let log = LogBuffer()
            guard await awaitOutput(of: process, containing: "listening", into: log, within: 30) else {
                process.signal(SIGKILL)
                throw TestError("imgw did not start: \(log.text.withLock { $0 })")
            }
            #expect(!log.text.withLock { $0 }.contains("jwt_secret is the built-in default"))
            return RunGateway(directory: directory, tlv: tlv, websocket: websocket, api: api, metrics: metrics, broker: broker, process: process)
        }

        /// SIGTERM; it must end (and its broker with it) within 20 s.
        func stop() async {
            process.signal(SIGTERM)
            let ended = await withTaskGroup(of: Bool.self) { group in
                group.addTask { await process.waitForExit(); return true }
                group.addTask { try? await Task.sleep(for: .seconds(20)); return false }
                let first = await group.next() ?? false
                group.cancelAll()
                return first
            }
            #expect(ended, "imgw ends within 20 s of SIGTERM")
            if !ended { process.signal(SIGKILL) }
        }
    }

    /// Runs a Python check; fails the test with its output unless it exits 0 with its closing line.
    static func check(_ script: String, _ arguments: [String], in directory: URL? = nil, python: String = WebTests.python) async throws {
        #expect(FileManager.default.isExecutableFile(atPath: python), "\(python) is missing: make test-deps installs it")
        let (status, output) = try await runCapturing(python, [root.appendingPathComponent(script).path] + arguments, in: directory)
        let closing = output.split(separator: "\n").last { $0.hasSuffix(" failed") || $0.contains(" failed, ") }
        #expect(status == 0, "\(script) failed:\n\(output)")
        #expect(closing?.contains(" 0 failed") == true, "\(script):\n\(output)")
        print("\(script): \(closing ?? "?")")
    }

    static var screenshots: String {
        let directory = root.appendingPathComponent(".build/test-artifacts/screenshots")
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory.path
    }

    @Test("every example of the README and of imcli --help works after a make run start, unedited")
    func examples() async throws {
        let gateway = try await RunGateway.start()
        try await Self.check(
            "Tests/examples/run_examples.py",
            ["--imcli", Self.imcli, "--readme", Self.root.appendingPathComponent("README.md").path, "--cwd", gateway.directory.path],
            python: "/usr/bin/python3")
        await gateway.stop()
    }

    @Test("RFC 6455 conformance of the WebSocket listener, from an independent client (Python websockets and hand-built frames)")
    func conformance() async throws {
        let gateway = try await RunGateway.start()
        let token = try await run(Self.imcli, ["token", "--config", gateway.config, "conformance"]).trimmingCharacters(in: .whitespacesAndNewlines)
        try await Self.check("Tests/web/ws_conformance.py", ["--url", "ws://127.0.0.1:\(gateway.websocket)/im", "--token", token])
        await gateway.stop()
    }

    @Test("two browsers chat both ways and with a TCP device, with presence, typing, groups and a message sent while offline")
    func browsers() async throws {
        let gateway = try await RunGateway.start()
        try await Self.check("Tests/web/browser_chat.py", [
            "--chat-url", "http://127.0.0.1:\(gateway.websocket)/", "--imcli", Self.imcli, "--imcli-config", gateway.config,
            "--api-url", "http://127.0.0.1:\(gateway.api)", "--api-key", gateway.apiKey, "--screenshots", Self.screenshots + "/chat",
        ])
        await gateway.stop()
    }

    @Test("the operator console: live plots rise with logins, presence lookup, a kick, a system message")
    func console() async throws {
        let gateway = try await RunGateway.start()
        try await Self.check("Tests/web/browser_console.py", [
            "--console-url", "http://127.0.0.1:\(gateway.api)/console", "--api-key", gateway.apiKey,
            "--ws-url", "ws://127.0.0.1:\(gateway.websocket)/im", "--token-url", "http://127.0.0.1:\(gateway.websocket)/dev/token",
            "--screenshots", Self.screenshots + "/console",
        ])
        await gateway.stop()
    }
}
