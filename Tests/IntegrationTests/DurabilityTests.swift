import Foundation
import IMClient
import IMGateway
import IMWire
import Testing

#if canImport(Glibc)
import Glibc
import IMTestSupport
#endif

/// An ACK means the message is stored: with imgw's defaults (the embedded broker, the SQLite
/// archive), what was ACKed to a device that is offline reaches it at its next plain LOGIN,
/// in order and once, whatever died in between (docs/PROTOCOL.md 6.14).
@Suite("Durability: an ACKed message survives the broker's and imgw's death", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct DurabilityTests {
    static let count = 200

    /// What kills what.
    enum Crash: String, CaseIterable, Sendable {
        /// Nothing: the broker still has the device's queue, and the archive has it too.
        case none
        /// kill -9 of the embedded broker; imgw starts another.
        case broker
        /// kill -9 of imgw and its broker together; a new imgw starts on the same data.
        case both
    }

    /// Kills what `crash` says; returns the gateway that serves afterwards.
    static func crash(_ crash: Crash, _ gateway: EmbeddedGateway, _ setup: EmbeddedGateway.Setup) async throws -> EmbeddedGateway {
        switch crash {
        case .none:
            return gateway
        case .broker:
            let broker = try #require(setup.brokerPID())
            kill(broker, SIGKILL)
            try await gateway.waitFor("embedded broker up", "the restarted broker")
            return gateway
        case .both:
            let broker = try #require(setup.brokerPID())
            await gateway.kill9()
            kill(broker, SIGKILL)
            return try await EmbeddedGateway.start(setup)
        }
    }

    @Test("200 chats ACKed to an offline device, then kill -9: its next plain LOGIN delivers all 200, in order, once", arguments: [Crash.broker, .both])
    func offlineDeviceGetsEverything(crash: Crash) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-durable-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        // Removed after the gateways and brokers are stopped (their pid files are in it).
        TestResources.track { try? FileManager.default.removeItem(at: directory) }
        let setup = EmbeddedGateway.Setup(directory: directory, tlvPort: freePort(), brokerPort: freePort(), metricsPort: freePort())
        let minter = TokenMinter(secret: IMGWProcess.secret)
        var gateway = try await EmbeddedGateway.start(setup)

        // bob's phone logs in once, and leaves.
        let phone = try await TestDevice.connect(port: setup.tlvPort)
        let first = try await phone.login(token: try await minter.mint(user: "bob"), device: "phone")
        #expect(first.syncStatus == .new && first.position?.offset == 0, "a device the archive does not know starts at the stream's end: \(first)")
        _ = try await phone.send(.logout(Logout()))
        try await phone.closed()

        // alice sends 200; each is ACKed with its place in her own stream.
        let alice = try await TestDevice.connect(port: setup.tlvPort)
        try await alice.login(token: try await minter.mint(user: "alice"), device: "laptop")
        for index in 1...Self.count {
            let ack = try await alice.chat(to: "bob", id: "m-\(index)", text: "message \(index)")
            #expect(ack.error == nil, "m-\(index): \(ack)")
            #expect(ack.streamOffset == UInt64(index), "m-\(index) is stored at offset \(index) of alice's own stream")
        }
        await alice.drop()

        gateway = try await Self.crash(crash, gateway, setup)

        // bob's phone logs in again, plain (no position): everything, in order, once.
        let again = try await TestDevice.connect(port: setup.tlvPort)
        let ok = try await again.login(token: try await minter.mint(user: "bob"), device: "phone")
        #expect(ok.syncStatus == .continued)
        #expect(ok.position?.offset == 0)
        var received: [String] = []
        while received.count < Self.count {
            let delivery = try await again.nextDelivery(within: 10, "delivery \(received.count + 1) of \(Self.count)")
            received.append(delivery.messageID)
            #expect(delivery.streamOffset == UInt64(received.count))
        }
        #expect(received == (1...Self.count).map { "m-\($0)" })
        // Nothing more of them: the next delivery is a message sent now.
        let marker = try await TestDevice.connect(port: setup.tlvPort)
        try await marker.login(token: try await minter.mint(user: "carol"), device: "phone")
        #expect(try await marker.chat(to: "bob", id: "after", text: "after the crash").error == nil)
        let next = try await again.nextDelivery(within: 10, "the message sent after the catch-up")
        #expect(next.messageID == "after" && !next.archived, "a repeat of a caught-up message came instead: \(next.messageID)")
        await marker.drop()
        await again.drop()
        await gateway.stop()
    }

    @Test("the same with IMClient: all 200, in order, none surfaced twice, also when the broker kept its queue (then every message comes from both)", arguments: Crash.allCases)
    func clientSurfacesEachOnce(crash: Crash) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-durable-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        // Removed after the gateways and brokers are stopped (their pid files are in it).
        TestResources.track { try? FileManager.default.removeItem(at: directory) }
        let setup = EmbeddedGateway.Setup(directory: directory, tlvPort: freePort(), brokerPort: freePort(), metricsPort: freePort())
        var gateway = try await EmbeddedGateway.start(setup)
        let bob = try await ClientReliabilityTests.client("bob", port: setup.tlvPort)
        await bob.logout()
        let alice = try await ClientReliabilityTests.client("alice", port: setup.tlvPort)
        for index in 1...Self.count {
            let receipt = try await alice.send(to: "bob", text: "message \(index)", messageID: "m-\(index)")
            #expect(receipt.streamOffset == UInt64(index))
        }
        await alice.close()
        gateway = try await Self.crash(crash, gateway, setup)

        let again = try await ClientReliabilityTests.client("bob", port: setup.tlvPort)
        let events = Collector(again.events)
        var ids: [String] = []
        var synced: IMClient.SyncResult?
        while synced == nil {
            switch try await events.next(within: 15, "bob's messages and the end of the catch-up") {
            case .message(let message): ids.append(message.messageID)
            case .synced(let result): synced = result
            default: break
            }
        }
        #expect(ids == (1...Self.count).map { "m-\($0)" }, "\(ids.count) surfaced")
        #expect(synced?.replayed == Self.count && synced?.position.offset == UInt64(Self.count))
        // What the broker still had (crash none) is dropped by the gateway: nothing more comes
        // before a message sent now.
        let carol = try await ClientReliabilityTests.client("carol", port: setup.tlvPort)
        _ = try await carol.send(to: "bob", text: "after", messageID: "after")
        while true {
            if case .message(let message) = try await events.next(within: 10, "the message sent after the catch-up") {
                #expect(message.messageID == "after", "a repeat came: \(message.messageID)")
                break
            }
        }
        await carol.close()
        await again.close()
        await gateway.stop()
    }

    @Test("a SQLite archive is one gateway's alone: a second gateway on the broker refuses to start with one, and says what to configure")
    func sqliteNotShared() async throws {
        let broker = try await TestBroker.start()
        let first = try await IMGWProcess.start(broker: broker)
        do {
            let second = try await IMGWProcess.start(broker: broker)
            Issue.record("a second gateway with a SQLite archive started on a shared broker")
            await second.stop()
        } catch {
            #expect("\(error)".contains("another gateway uses this broker (\("gw-\(first.port)"))"), "\(error)")
            #expect("\(error)".contains("PostgreSQL archive (archive.url)"), "\(error)")
        }
        // With none, or a shared PostgreSQL archive, it may.
        let third = try await IMGWProcess.start(broker: broker, archive: .none)
        await third.stop()
        // A gateway that stopped cleanly took its stats away: another may take the broker over.
        await first.stop()
        let fourth = try await IMGWProcess.start(broker: broker)
        await fourth.stop()
    }
}
