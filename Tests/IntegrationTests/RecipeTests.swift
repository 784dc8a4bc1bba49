import Foundation
import IMGateway
import IMWire
import Logging
import Mosquitto
import Testing
import IMTestSupport

/// docs/SECURITY.md's mosquitto recipe, run as written (only its two ports replaced by free
/// ones): imgw works through the gateways' listener, and an account of the other listener
/// can neither read an inbox, forge a chat or a share, nor take over a device session.
@Suite("SECURITY.md's broker recipe", .stopsWhatItStarts, .timeLimit(.minutes(2)))
struct RecipeTests {
    /// The fenced block after each `<!-- recipe:NAME -->` in docs/SECURITY.md.
    static func recipe() throws -> [String: String] {
        let text = try String(contentsOf: URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("docs/SECURITY.md"), encoding: .utf8)
        var blocks: [String: String] = [:]
        var name: String?
        var body: [String]?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.hasPrefix("<!-- recipe:"), line.hasSuffix("-->") {
                name = String(line.dropFirst("<!-- recipe:".count).dropLast(" -->".count))
            } else if name != nil, body == nil, line.hasPrefix("```") {
                body = []
            } else if let current = name, body != nil, line.hasPrefix("```") {
                blocks[current] = body!.joined(separator: "\n") + "\n"
                name = nil
                body = nil
            } else if body != nil {
                body!.append(line)
            }
        }
        return blocks
    }

    @Test("the recipe's broker: imgw chats through it; the other listener's account reads no inbox, forges no chat or share, takes over no session")
    func attacks() async throws {
        let blocks = try Self.recipe()
        let conf = try #require(blocks["mosquitto.conf"])
        #expect(Set(blocks.keys) == ["mosquitto.conf", "gateways.acl", "apps.acl", "passwords"])
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-recipe-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let gatewaysPort = freePort()
        let appsPort = freePort()
        #expect(conf.contains("listener 1883 127.0.0.1") && conf.contains("listener 1884 127.0.0.1"))
        var written = conf.replacingOccurrences(of: "listener 1883 127.0.0.1", with: "listener \(gatewaysPort) 127.0.0.1")
            .replacingOccurrences(of: "listener 1884 127.0.0.1", with: "listener \(appsPort) 127.0.0.1")
        // (As root mosquitto drops to the user "mosquitto", who cannot read this directory.)
        if geteuid() == 0 { written += "user root\n" }
        try written.write(to: directory.appendingPathComponent("mosquitto.conf"), atomically: true, encoding: .utf8)
        for name in ["gateways.acl", "apps.acl"] {
            try #require(blocks[name]).write(to: directory.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
        let gatewayPassword = "gw-\(UInt64.random(in: 0...UInt64.max))"
        let backendPassword = "be-\(UInt64.random(in: 0...UInt64.max))"
        try await run("/bin/sh", [
            "-c", "IMGW_BROKER_PASSWORD='\(gatewayPassword)' BACKEND_PASSWORD='\(backendPassword)'; set -e\n" + (try #require(blocks["passwords"])),
        ], in: directory)
        let broker = try spawn("/usr/sbin/mosquitto", ["-c", "mosquitto.conf"], in: directory)
        let log = LogBuffer()
        let started = await awaitOutput(of: broker, containing: " running", into: log)
        try #require(started, "mosquitto with the recipe: \(log.text.withLock { $0 })")

        // imgw on the gateways' listener.
        var configuration = GatewayConfiguration.defaults
        configuration.listen.host = "127.0.0.1"
        configuration.listen.port = 0
        configuration.auth.jwtSecret = TestGateway.secret
        configuration.metrics.enabled = false
        configuration.archive.path = directory.appendingPathComponent("archive.sqlite").path
        var logger = Logger(label: "imgw-recipe")
        logger.logLevel = .warning
        let server = try await GatewayServer.bind(
            configuration: configuration,
            broker: BrokerEndpoint(host: "127.0.0.1", port: gatewaysPort, username: "imgw", password: gatewayPassword), logger: logger)
        let task = runGateway(server, logger: logger)
        TestResources.track {
            server.shutdown()
            _ = try? await task.value
        }
        let port = server.localAddress.port!
        let minter = TokenMinter(secret: TestGateway.secret)
        let alice = try await TestDevice.connect(port: port)
        try await alice.login(token: try await minter.mint(user: "alice"), device: "phone")
        let bob = try await TestDevice.connect(port: port)
        try await bob.login(token: try await minter.mint(user: "bob"), device: "phone")

        // The backend account, on the other listener.
        func backend(_ clientID: String) -> MosquittoClient {
            var settings = MosquittoClient.Configuration(clientID: clientID, host: "127.0.0.1", port: appsPort)
            settings.username = "backend"
            settings.password = backendPassword
            settings.connectTimeout = 5
            return makeClient(configuration: settings)
        }
        let spy = backend("spy")
        let seen = try await connected(spy)
        // Reading bob's inbox: refused (SUBACK failure), or granted and then nothing arrives.
        _ = try? await spy.subscribe("im/u/bob/inbox", qos: .atLeastOnce)
        try await spy.subscribe("im/t/marker", qos: .atLeastOnce)
        // Forging a chat to bob and a share of alice's for the backend.
        let forged = #"{"from":"mallory","id":"forged-1","text":"pay me","to":"bob","ts":1700000000000,"type":"text"}"#
        _ = try? await spy.publish(topic: "im/u/bob/inbox", string: forged, qos: .atLeastOnce)
        _ = try? await spy.publish(
            topic: "im/u/alice/location/share", string: #"{"audience":["mallory"],"until":4102444800000,"user":"alice"}"#,
            qos: .atLeastOnce, retain: true)
        #expect(try await alice.chat(to: "bob", id: "real-1", text: "hello").error == nil)
        #expect(try await bob.nextDelivery("alice's chat").messageID == "real-1", "the forged chat never reached bob")
        let mallory = try await TestDevice.connect(port: port)
        try await mallory.login(token: try await minter.mint(user: "mallory"), device: "phone")
        try await mallory.send(.locationWatch(LocationWatch(users: ["alice"])))
        #expect(try await mallory.nextAck().error == .forbidden, "the forged share gave nothing")
        // The spy saw nothing of bob's inbox: its marker arrives first and alone.
        try await spy.publish(topic: "im/t/marker", string: "end", qos: .atLeastOnce)
        let first = try await seen.next(within: 10, "the marker")
        #expect(first.topic == "im/t/marker", "the spy read \(first.topic)")

        // Taking over bob's session: the id is the user name on this listener, so bob stays.
        // (Its connection is taken: under the backend's own id, which also ends the spy's.)
        let thief = backend("imgw/bob/phone")
        try await thief.connect()
        #expect(try await alice.chat(to: "bob", id: "real-2", text: "still there?").error == nil)
        #expect(try await bob.nextDelivery("alice's second chat").messageID == "real-2")
        #expect(bob.isActive)
        await thief.close()
        await spy.close()
        await alice.drop()
        await bob.drop()
        await mallory.drop()
    }
}
