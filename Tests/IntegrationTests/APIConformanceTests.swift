import Foundation
import IMGateway
import Testing
import IMTestSupport

/// The server API against its own document: schemathesis (installed by `make test`) sends
/// what docs/openapi.yaml allows and what it does not, to an imgw process on a real broker,
/// and checks every answer (no 5xx, nothing outside the schema, invalid requests refused,
/// valid ones taken, 405 for other methods).
@Suite("The server API conforms to docs/openapi.yaml", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct APIConformanceTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardized
    /// Where `make test` installs schemathesis.
    static let schemathesis = root.appendingPathComponent(".build/schemathesis-venv/bin/st").path

    @Test("schemathesis finds no 5xx, no answer outside the schema, and no request wrongly taken or refused (seeds 1 and 2)")
    func schemathesisRun() async throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: Self.schemathesis),
            "schemathesis is not installed at \(Self.schemathesis): make test-deps installs it")
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true)
        let reports = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-schemathesis-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: reports, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: reports) }
        for seed in [1, 2] {
            let (status, output) = try await runCapturing(Self.schemathesis, [
                "run", Self.root.appendingPathComponent("docs/openapi.yaml").path,
                "--url", "http://127.0.0.1:\(gateway.apiPort)",
                "-H", "Authorization: Bearer \(IMGWProcess.apiKey)",
                "--checks", "all", "--max-examples", "100", "--seed", "\(seed)", "--workers", "1",
                "--report-dir", reports.path,
            ], in: reports)
            #expect(status == 0 && output.contains("No issues found"), "seed \(seed):\n\(output.suffix(6000))")
        }
        // Whatever it sent, the API's broker client still works.
        let bob = try await TestDevice.connect(port: gateway.port)
        try await bob.login(token: try await TokenMinter(secret: IMGWProcess.secret).mint(user: "bob"), device: "phone")
        let sent = try await ServerAPITests.call(gateway, "POST", "/v1/users/bob/messages", body: #"{"id":"after-fuzz","text":"still here"}"#)
        #expect(sent.status == 202, "\(sent.body)")
        #expect(try await bob.nextDelivery().messageID == "after-fuzz")
        await gateway.stop()
    }
}
