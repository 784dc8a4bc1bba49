import Foundation
import IMGateway
import IMWire
import Mosquitto
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
import IMTestSupport
#endif

/// imgw with its embedded mosquitto, as `make run` starts it: the broker imgw restarts must
/// not inherit imgw's sockets (its device port, its MQTT clients' sockets), or the broker
/// keeps the device port bound after imgw is gone and never sees imgw close a client socket.
@Suite("imgw with its embedded broker", .stopsWhatItStarts, .timeLimit(.minutes(2)))
struct EmbeddedBrokerTests {
    static let keepalive = EmbeddedGateway.keepalive

    @Test("kill -9 of the embedded broker: the restarted one shares no socket with imgw and a drop goes offline at once; kill -9 of imgw: a new one serves on the same ports within 5 s")
    func brokerThenGatewayKilled() async throws {
        let setup = try EmbeddedGateway.Setup.scratch()
        defer { try? FileManager.default.removeItem(at: setup.directory) }
        let minter = TokenMinter(secret: IMGWProcess.secret)

        let gateway = try await EmbeddedGateway.start(setup)
        let firstBroker = try #require(setup.brokerPID(), "the embedded broker's pid file")
        let early = try await TestDevice.connect(port: setup.tlvPort)
        try await early.login(token: try await minter.mint(user: "una"), device: "phone")

        // The broker dies; imgw starts another one.
        kill(firstBroker, SIGKILL)
        try await gateway.waitFor("embedded broker up", "the restarted broker")
        let broker = try #require(setup.brokerPID())
        #expect(broker != firstBroker)
        let gatewaySockets = ProcessDescriptors.socketInodes(of: gateway.process.pid)
        let brokerSockets = ProcessDescriptors.socketInodes(of: broker)
        #expect(!gatewaySockets.isEmpty && !brokerSockets.isEmpty)
        #expect(gatewaySockets.isDisjoint(with: brokerSockets), "sockets shared by imgw and the restarted broker: \(gatewaySockets.intersection(brokerSockets))")

        // A device that drops goes offline at once (the broker sees imgw close its socket).
        // (The broker refuses anonymous clients: the read-only observer account watches.)
        let credentials = try BrokerCredentials.loadOrCreate(in: setup.dataDirectory)
        var watcherConfiguration = MosquittoClient.Configuration(clientID: BrokerCredentials.observerClientID, host: "127.0.0.1", port: setup.brokerPort)
        watcherConfiguration.connectTimeout = 5
        watcherConfiguration.username = BrokerCredentials.observerUsername
        watcherConfiguration.password = credentials.observerPassword
        let watcher = makeClient(configuration: watcherConfiguration)
        let presence = try await connected(watcher)
        try await watcher.subscribe("im/u/una/presence/tablet", qos: .atLeastOnce)
        let device = try await TestDevice.connect(port: setup.tlvPort)
        try await device.login(token: try await minter.mint(user: "una"), device: "tablet")
        #expect(try await presence.next(within: 10, "una online").payloadString.contains(#""online""#))
        await device.drop()
        let offline = try await presence.next(within: Double(Self.keepalive), "una offline within the keepalive")
        #expect(offline.payloadString.contains(#""offline""#))
        await watcher.close()
        await early.drop()

        // imgw dies; its broker gets SIGTERM (its parent-death signal) and follows it, and a
        // new imgw takes the same ports.
        let killed = ContinuousClock.now
        await gateway.kill9()
        #expect(await Self.ended(broker, within: .seconds(10)), "the broker outlived imgw's kill -9")
        let next = try await EmbeddedGateway.start(setup)
        let again = try await TestDevice.connect(port: setup.tlvPort)
        try await again.login(token: try await minter.mint(user: "una"), device: "phone")
        let took = ContinuousClock.now - killed
        #expect(took < .seconds(5), "a new imgw served a login \(took) after kill -9")
        #expect(setup.brokerPID() != broker, "the new imgw runs a broker of its own on the same port")

        await again.drop()
        await next.stop()
    }

    @Test("SIGHUP (the terminal of `make run` closed): imgw shuts down as for SIGTERM, exit status 0, and its broker ends with it")
    func hangUp() async throws {
        let setup = try EmbeddedGateway.Setup.scratch()
        defer { try? FileManager.default.removeItem(at: setup.directory) }
        let gateway = try await EmbeddedGateway.start(setup)
        let broker = try #require(setup.brokerPID(), "the embedded broker's pid file")
        let device = try await TestDevice.connect(port: setup.tlvPort)
        try await device.login(token: try await TokenMinter(secret: IMGWProcess.secret).mint(user: "una"), device: "phone")

        gateway.process.signal(SIGHUP)
        var kicked = false
        while let frame = try? await device.frames.next(within: 10, "the shutdown notice") {
            if case .kick(let kick)? = try? IMMessage(frame: frame) { kicked = kick.reason == .serverShuttingDown }
        }
        #expect(kicked, "the device was told the gateway shuts down")
        let status = await gateway.process.waitForExit()
        #expect(status == 0, "imgw's wait status after SIGHUP: \(status)")
        #expect(await Self.ended(broker, within: .seconds(10)), "the broker outlived imgw")
    }

    /// Whether `pid` has ended (gone, or a zombie nobody reaps) within `limit`.
    static func ended(_ pid: pid_t, within limit: Duration) async -> Bool {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")"),
                  let state = stat[stat.index(after: close)...].drop(while: { $0 == " " }).first,
                  state != "Z" && state != "X"
            else { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }
}
