import Foundation
import IMGateway
import IMWire
import Mosquitto
import Testing
import IMTestSupport

/// The imgw binary as operators run it: killed with -9 under load, two of them on one
/// broker.
@Suite("imgw processes", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct GatewayProcessTests {
    @Test("kill -9 of imgw while 300 messages flow: every message the sender saw ACKed reaches the recipient; wills fire")
    func killUnderLoad() async throws {
        let broker = try await TestBroker.start()
        let keepalive = 5
        let first = try await IMGWProcess.start(broker: broker, keepalive: keepalive, archive: .none)
        let minter = TokenMinter(secret: IMGWProcess.secret)

        let watcher = makeClient(broker)
        let presence = try await connected(watcher)
        try await watcher.subscribe("im/u/bob/presence/+", qos: .atLeastOnce)

        let bob = try await TestDevice.connect(port: first.port)
        try await bob.login(token: try await minter.mint(user: "bob"), device: "phone")
        #expect(try await presence.next(within: 10, "bob online").payloadString.contains("online"))
        let alice = try await TestDevice.connect(port: first.port)
        try await alice.login(token: try await minter.mint(user: "alice"), device: "phone")

        // Bob's device reads and ACKs what arrives, until the connection dies.
        let received = Collector(AsyncStream<String> { continuation in
            Task {
                while let frame = try? await bob.frames.next(within: 30, "bob's frames") {
                    if case .delivery(let delivery)? = try? IMMessage(frame: frame) {
                        continuation.yield(delivery.messageID)
                        try? await bob.ack(frame)
                    }
                }
                continuation.finish()
            }
        })

        // Alice sends 300, pipelined; the gateway dies a third of the way in.
        var acked = Set<String>()
        var sent = 0
        let ackStream = AsyncStream<String> { continuation in
            Task {
                while let frame = try? await alice.frames.next(within: 30, "alice's ACKs") {
                    if case .ack(let ack)? = try? IMMessage(frame: frame), ack.error == nil, let id = ack.messageID {
                        continuation.yield(id)
                    }
                }
                continuation.finish()
            }
        }
        let acks = Collector(ackStream)
        for index in 0..<300 {
            do {
                try await alice.send(.chat(ChatSend(to: "bob", messageID: "k-\(index)", content: .text("message \(index)"))))
                sent += 1
            } catch {
                break
            }
            if index == 100 {
                // Let some ACKs come back, then kill.
                while acked.count < 50 { acked.insert(try await acks.next(within: 10, "ACK")) }
                await first.kill9()
            }
        }
        // Collect every ACK that made it out before the process died.
        while let id = try? await acks.next(within: 2, "late ACK") { acked.insert(id) }
        #expect(acked.count >= 50)

        // The broker notices the dead gateway's sessions by keepalive and fires the wills.
        let offline = try await presence.next(within: Double(keepalive) * 1.5 + 5, "bob offline by will")
        #expect(offline.payloadString.contains("offline"))

        // A new imgw on the same broker; bob logs in again and gets everything ACKed.
        // Its keepalive is the default: 5 s can pass unanswered on a loaded machine (libmosquitto
        // then ends the session), and nothing here waits for this gateway's wills.
        let second = try await IMGWProcess.start(broker: broker, archive: .none)
        // What the new gateway said goes with any failure from here on.
        do {
            let bobAgain = try await TestDevice.connect(port: second.port)
            try await bobAgain.login(token: try await minter.mint(user: "bob"), device: "phone")
            var seen = Set<String>()
            while let id = try? await received.next(within: 0.5, "before the kill") { seen.insert(id) }
            /// Bob's next frame: a delivery is ACKed and counted, a KICK or ERROR ends the test.
            func readDelivery(_ what: String) async throws {
                let (frame, message) = try await bobAgain.next(within: 15, what)
                switch message {
                case .delivery(let delivery):
                    seen.insert(delivery.messageID)
                    try await bobAgain.ack(frame)
                case .kick, .error:
                    throw TestError("bob was told \(message)")
                default:
                    break
                }
            }
            while !acked.isSubset(of: seen) {
                try await readDelivery("redelivered/queued messages (\(acked.subtracting(seen).count) missing)")
            }
            #expect(acked.isSubset(of: seen), "every ACKed message reached bob")
            let ackedBeforeKill = acked.count

            // Alice reconnects as a client would: resends what was not ACKed (resend flag,
            // same ids), then the rest. Bob ends up with all 300, each id once per delivery
            // that the gateway did not know was a duplicate (the resend of an accepted id is
            // not published twice).
            let aliceAgain = try await TestDevice.connect(port: second.port)
            try await aliceAgain.login(token: try await minter.mint(user: "alice"), device: "phone")
            for index in 0..<300 where !acked.contains("k-\(index)") {
                let ack = try await aliceAgain.chat(to: "bob", id: "k-\(index)", text: "message \(index)", resend: index < sent)
                #expect(ack.error == nil)
                acked.insert("k-\(index)")
            }
            while seen.count < 300 { try await readDelivery("the rest (\(300 - seen.count) missing)") }
            #expect(seen == Set((0..<300).map { "k-\($0)" }))
            print("kill -9: \(sent) sent before the kill, \(ackedBeforeKill) of them ACKed; all 300 delivered after the restart")
        } catch {
            throw TestError("\(error); the second imgw said:\n\(second.output.text.withLock { $0.suffix(6_000) })")
        }
        await second.kill9()
        await watcher.close()
    }

    @Test("SIGTERM: devices are told the gateway shuts down, their presence goes offline, imgw exits")
    func gracefulShutdown() async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let watcher = makeClient(broker)
        let presence = try await connected(watcher)
        try await watcher.subscribe("im/u/gina/presence/+", qos: .atLeastOnce)
        let gina = try await TestDevice.connect(port: gateway.port)
        try await gina.login(token: try await minter.mint(user: "gina"), device: "phone")
        #expect(try await presence.next(within: 10, "online").payloadString.contains("online"))

        await gateway.stop()  // SIGTERM, and wait for the exit
        var kicked = false
        while let frame = try? await gina.frames.next(within: 5, "the shutdown notice") {
            if case .kick(let kick)? = try? IMMessage(frame: frame) { kicked = kick.reason == .serverShuttingDown }
        }
        #expect(kicked, "a KICK with SERVER_SHUTTING_DOWN before the close")
        #expect(try await presence.next(within: 10, "offline").payloadString.contains("offline"))
        await watcher.close()
    }

    @Test("imgw logs in to a broker that wants a password (broker.username/password)")
    func brokerCredentials() async throws {
        var options = TestBroker.Options()
        options.users = ["imgw": "s3cret"]
        let broker = try await TestBroker.start(options)
        let gateway = try await IMGWProcess.start(broker: broker, brokerLines: ["username: imgw", "password: s3cret"])
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let alice = try await TestDevice.connect(port: gateway.port)
        let ok = try await alice.login(token: try await minter.mint(user: "alice"), device: "phone")
        #expect(ok.userID == "alice")

        let wrong = try await IMGWProcess.start(broker: broker, brokerLines: ["username: imgw", "password: nope"])
        let bob = try await TestDevice.connect(port: wrong.port)
        try await bob.send(.login(LoginRequest(token: try await minter.mint(user: "bob"), deviceID: "phone")))
        let (_, message) = try await bob.next(within: 10, "the broker refusal")
        guard case .error(let notice) = message else {
            Issue.record("expected ERROR, got \(message)")
            return
        }
        #expect(notice.code == .brokerUnavailable)
        #expect(notice.message?.contains("refused") == true)
        await gateway.stop()
        await wrong.stop()
    }

    @Test("two imgw processes given one gateway_id: each warns that another publishes its stats as the same gateway")
    func sameGatewayID() async throws {
        let broker = try await TestBroker.start()
        let first = try await IMGWProcess.start(broker: broker, gatewayID: "twin", lines: ["stats_interval: 1"])
        let second = try await IMGWProcess.start(broker: broker, gatewayID: "twin", lines: ["stats_interval: 1"])
        let warning = "another imgw publishes its stats as this gateway"
        #expect(await first.output.waitFor(warning, within: 10))
        #expect(await second.output.waitFor(warning, within: 10))
        await first.stop()
        await second.stop()
    }

    @Test("two imgw processes on one broker: a user on one chats with a user on the other")
    func twoGateways() async throws {
        let broker = try await TestBroker.start()
        let east = try await IMGWProcess.start(broker: broker, archive: .none)
        let west = try await IMGWProcess.start(broker: broker, archive: .none)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let alice = try await TestDevice.connect(port: east.port)
        try await alice.login(token: try await minter.mint(user: "alice"), device: "phone")
        let bob = try await TestDevice.connect(port: west.port)
        try await bob.login(token: try await minter.mint(user: "bob"), device: "phone")

        #expect(try await alice.chat(to: "bob", id: "x-1", text: "from east").error == nil)
        let (frame, message) = try await bob.next(within: 10, "the cross-gateway delivery")
        guard case .delivery(let delivery) = message else {
            Issue.record("expected a delivery, got \(message)")
            return
        }
        #expect(delivery.from == "alice")
        #expect(delivery.content.text == "from east")
        try await bob.ack(frame)

        #expect(try await bob.chat(to: "alice", id: "y-1", text: "from west").error == nil)
        var back: IMMessage
        repeat {
            (_, back) = try await alice.next(within: 10, "the reply")  // after bob's "delivered" receipt
        } while !{ if case .delivery = back { true } else { false } }()
        guard case .delivery(let reply) = back else { return }
        #expect(reply.from == "bob")

        await east.stop()
        await west.stop()
    }
}
