import Foundation
import IMGateway
import IMWire
import Mosquitto
import Testing

#if canImport(Glibc)
import Glibc
import IMTestSupport
#endif

/// The embedded broker as `make run` starts it refuses anonymous clients; the observer
/// account reads everything under `im/` and writes nothing; no account but the gateway's
/// can use a device's client id (`imgw/...`).
@Suite("imgw's embedded broker: authenticated, read-only observer", .stopsWhatItStarts, .timeLimit(.minutes(2)))
struct EmbeddedBrokerSecurityTests {
    private static func observer(
        _ setup: EmbeddedGateway.Setup, clientID: String = BrokerCredentials.observerClientID, password: String? = nil
    ) throws -> MosquittoClient {
        let credentials = try BrokerCredentials.loadOrCreate(in: setup.dataDirectory)
        var configuration = MosquittoClient.Configuration(clientID: clientID, host: "127.0.0.1", port: setup.brokerPort)
        configuration.connectTimeout = 5
        configuration.username = BrokerCredentials.observerUsername
        configuration.password = password ?? credentials.observerPassword
        return makeClient(configuration: configuration)
    }

    private static func isRefused(_ client: MosquittoClient) async -> Bool {
        do {
            try await client.connect()
            return false
        } catch {
            return "\(error)".contains("Not authorized") || "\(error)".contains("0x87") || "\(error)".contains("0x86")
        }
    }

    @Test("anonymous refused; the observer sees chat, cannot forge a chat or a share, and cannot take over a device's session")
    func defaults() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-secure-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let setup = EmbeddedGateway.Setup(directory: directory, tlvPort: freePort(), brokerPort: freePort(), metricsPort: freePort())
        let gateway = try await EmbeddedGateway.start(setup)
        // It printed the command to watch with, before it listened.
        let command = try #require(gateway.printedLine(containing: "watch the broker with: "))
        #expect(command.contains("mosquitto_sub -h 127.0.0.1 -p \(setup.brokerPort) -u imgw-observer -P \"$(cat \(setup.dataDirectory)/observer.password)\" -i imgw-observer -v -t 'im/#'"))

        // The passwords: in the data directory, readable by their owner only.
        let credentials = try BrokerCredentials.loadOrCreate(in: setup.dataDirectory)
        for file in [credentials.gatewayPasswordFile, credentials.observerPasswordFile, credentials.dynamicSecurityFile] {
            var info = stat()
            #expect(stat(file, &info) == 0 && info.st_mode & 0o777 == 0o600, "\(file)")
        }

        // Anonymous: refused.
        var anonymous = MosquittoClient.Configuration(clientID: "anon-\(UInt32.random(in: 0...UInt32.max))", host: "127.0.0.1", port: setup.brokerPort)
        anonymous.connectTimeout = 5
        #expect(await Self.isRefused(makeClient(configuration: anonymous)), "an anonymous client")
        // The observer with a wrong password: refused.
        #expect(await Self.isRefused(try Self.observer(setup, password: "wrong")), "a wrong password")

        // The observer reads the chat.
        let observer = try Self.observer(setup)
        let seen = try await connected(observer)
        #expect(try await observer.subscribe("im/#", qos: .atLeastOnce) == .atLeastOnce)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let alice = try await TestDevice.connect(port: setup.tlvPort)
        try await alice.login(token: try await minter.mint(user: "alice"), device: "phone")
        let bob = try await TestDevice.connect(port: setup.tlvPort)
        try await bob.login(token: try await minter.mint(user: "bob"), device: "phone")
        #expect(try await alice.chat(to: "bob", id: "m1", text: "first").error == nil)
        #expect(try await bob.nextDelivery("m1").messageID == "m1")
        var inbox: MosquittoMessage?
        while inbox == nil {
            let message = try await seen.next(within: 10, "the chat on bob's inbox")
            if message.topic == "im/u/bob/inbox" { inbox = message }
        }
        #expect(inbox?.payloadString.contains("first") == true)

        // The observer forges a chat into bob's inbox and a share of alice's for mallory:
        // the broker refuses both (a v5 PUBACK with "not authorized", or nothing at all).
        let forged = #"{"from":"mallory","id":"forged-1","text":"pay me","to":"bob","ts":1700000000000,"type":"text"}"#
        _ = try? await observer.publish(topic: "im/u/bob/inbox", string: forged, qos: .atLeastOnce)
        let share = #"{"audience":["mallory"],"until":4102444800000,"user":"alice"}"#
        _ = try? await observer.publish(topic: "im/u/alice/location/share", string: share, qos: .atLeastOnce, retain: true)
        // Had the forgery been accepted, bob's session would have it before m2.
        #expect(try await alice.chat(to: "bob", id: "m2", text: "second").error == nil)
        #expect(try await bob.nextDelivery("m2").messageID == "m2", "the forged chat never reached bob")
        let mallory = try await TestDevice.connect(port: setup.tlvPort)
        try await mallory.login(token: try await minter.mint(user: "mallory"), device: "phone")
        try await mallory.send(.locationWatch(LocationWatch(users: ["alice"])))
        #expect(try await mallory.nextAck().error == .forbidden, "the forged share gave mallory nothing")

        // With write access (the gateway's own account) the same chat is still not delivered
        // unless it carries the tag of the gateways' secret (defense in depth); with the tag
        // it is, so what stopped the observer's forgery was the broker, not its shape.
        var writer = MosquittoClient.Configuration(clientID: "writer-\(UInt32.random(in: 0...UInt32.max))", host: "127.0.0.1", port: setup.brokerPort)
        writer.username = BrokerCredentials.gatewayUsername
        writer.password = credentials.gatewayPassword
        let gatewayAccount = makeClient(configuration: writer)
        try await gatewayAccount.connect()
        let unsigned = forged.replacingOccurrences(of: "forged-1", with: "forged-2")
        try await gatewayAccount.publish(topic: "im/u/bob/inbox", string: unsigned, qos: .atLeastOnce)
        let signed = Array(forged.replacingOccurrences(of: "forged-1", with: "signed-3").utf8)
        let tag = MessageAuthenticator(secret: IMGWProcess.secret).tag(topic: "im/u/bob/inbox", payload: signed)
        try await gatewayAccount.publish(
            topic: "im/u/bob/inbox", payload: signed, qos: .atLeastOnce,
            properties: MQTTProperties(correlationData: tag))
        #expect(try await bob.nextDelivery("the signed control").messageID == "signed-3", "the unsigned one was dropped")
        await gatewayAccount.close()

        // The observer cannot use bob's device's client id; bob stays connected.
        #expect(await Self.isRefused(try Self.observer(setup, clientID: "imgw/bob/phone")), "a device's client id")
        #expect(try await alice.chat(to: "bob", id: "m3", text: "third").error == nil)
        #expect(try await bob.nextDelivery("m3").messageID == "m3", "bob's session survived")
        #expect(bob.isActive)

        await observer.close()
        await alice.drop()
        await bob.drop()
        await mallory.drop()
        await gateway.stop()
    }
}

/// `imgw check-config` on the broker: what it can tell from outside.
@Suite("imgw check-config: the broker", .stopsWhatItStarts, .timeLimit(.minutes(2)))
struct CheckConfigBrokerTests {
    @Test("a broker that lets anonymous clients in is named as such; the gateway's account may subscribe; the embedded broker says what it enforces")
    func brokerFindings() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-check-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let broker = try await TestBroker.start()  // anonymous clients allowed
        let external = directory.appendingPathComponent("external.yaml")
        try "broker:\n  url: mqtt://127.0.0.1:\(broker.port)\n".write(to: external, atomically: true, encoding: .utf8)
        let output = try await run(IMGWProcess.executable, ["check-config", "--config", external.path])
        #expect(output.contains("broker: warning: mqtt://127.0.0.1:\(broker.port) accepts anonymous clients"))
        #expect(output.contains("broker: ok: the gateway's account may subscribe to im/#"))
        #expect(output.contains("OK"))

        let embedded = directory.appendingPathComponent("embedded.yaml")
        try "embedded_broker:\n  data_dir: \(directory.path)/broker\n".write(to: embedded, atomically: true, encoding: .utf8)
        let local = try await run(IMGWProcess.executable, ["check-config", "--config", embedded.path])
        #expect(local.contains("broker: ok: the embedded broker refuses anonymous clients"))
        #expect(!FileManager.default.fileExists(atPath: "\(directory.path)/broker"), "check-config creates nothing")
    }

    @Test("the offline-push webhook works with the embedded broker's accounts: the gateway may follow every presence")
    func offlinePush() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-push-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let receiver = try await WebhookReceiver.start()
        var setup = EmbeddedGateway.Setup(directory: directory, tlvPort: freePort(), brokerPort: freePort(), metricsPort: freePort())
        setup.push = receiver.url
        let gateway = try await EmbeddedGateway.start(setup)
        // (It may have been printed before "listening".)
        if gateway.printedLine(containing: "offline push ready") == nil {
            try await gateway.waitFor("offline push ready", "the push client subscribed")
        }
        #expect(gateway.printedLine(containing: "refused") == nil)
        let alice = try await TestDevice.connect(port: setup.tlvPort)
        try await alice.login(token: try await TokenMinter(secret: IMGWProcess.secret).mint(user: "alice"), device: "phone")
        #expect(try await alice.chat(to: "bob", id: "m1", text: "are you there?").error == nil)
        let request = try await receiver.next(within: 5)
        #expect(request.json["to"] as? String == "bob" && request.signatureVerifies(secret: IMGWProcess.pushSecret))
        await gateway.stop()
    }

    @Test("the gateway's credentials refused by the broker: an error, exit status 1")
    func credentialsRefused() async throws {
        let setupDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-check-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: setupDirectory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: setupDirectory) }
        let setup = EmbeddedGateway.Setup(directory: setupDirectory, tlvPort: freePort(), brokerPort: freePort(), metricsPort: freePort())
        let gateway = try await EmbeddedGateway.start(setup)
        let config = setupDirectory.appendingPathComponent("wrong.yaml")
        try "broker:\n  url: mqtt://127.0.0.1:\(setup.brokerPort)\n  username: imgw\n  password: wrong\n".write(to: config, atomically: true, encoding: .utf8)
        await #expect(throws: (any Error).self) { try await run(IMGWProcess.executable, ["check-config", "--config", config.path]) }
        let process = try spawn(IMGWProcess.executable, ["check-config", "--config", config.path])
        var lines: [String] = []
        for await line in process.lines { lines.append(line) }
        #expect(await process.waitForExit() != 0)
        #expect(lines.contains { $0.contains("broker: ok: mqtt://127.0.0.1:\(setup.brokerPort) refuses anonymous clients") })
        #expect(lines.contains { $0.contains("broker: error: mqtt://127.0.0.1:\(setup.brokerPort) refuses the gateway's credentials") })
        await gateway.stop()
    }
}
