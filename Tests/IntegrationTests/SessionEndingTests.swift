import Foundation
import IMGateway
import IMWire
import Mosquitto
import NIOCore
import Testing
import IMTestSupport

/// Ending a session while the device holds deliveries it has not ACKed: under ack-through
/// their PUBACKs are held, and nothing the session sends may wait behind them. Each way of
/// ending (LOGOUT, an abrupt drop, a takeover by a new login, SIGTERM) must publish the
/// right presence at once, free the device id, give the held message back at the next
/// login, and leave no connection counted. Real brokers (mosquitto and ejabberd), real imgw processes; the
/// gateway's MQTT keepalive is 60 s, so a presence that only the broker's keepalive would
/// fix arrives far too late to pass.
@Suite("Ending a session with deliveries unACKed", .stopsWhatItStarts, .startsEjabberdNodes)
struct SessionEndingTests {
    /// What the device received and did not ACK.
    enum Held: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case chatQoS1, chatQoS2, pubsubQoS1, pubsubQoS2
        var testDescription: String { rawValue }
        var qos: IMQoS { self == .chatQoS1 || self == .pubsubQoS1 ? .atLeastOnce : .exactlyOnce }
        var isChat: Bool { self == .chatQoS1 || self == .chatQoS2 }
    }

    /// How the session ends.
    enum Ending: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case logout, drop, takeover, sigterm
        var testDescription: String { rawValue }
    }

    static let keepalive = 60
    /// "At once": far below the keepalive.
    static let prompt: Double = 5

    /// One way of ending with one kind of held delivery.
    struct Case: Sendable, CustomTestStringConvertible {
        var ending: Ending
        var held: Held
        var testDescription: String { "\(ending.rawValue), \(held.rawValue)" }
        static let all = Ending.allCases.flatMap { ending in Held.allCases.map { Case(ending: ending, held: $0) } }
    }

    @Test("the session ends in bounded time, presence, device id, redelivery and connection count all right", arguments: BrokerKind.allCases, Case.all)
    func endWithHeldDelivery(on kind: BrokerKind, _ test: Case) async throws {
        let (ending, held) = (test.ending, test.held)
        let broker = try await kind.start()
        var gateway = try await IMGWProcess.start(broker: broker, keepalive: Self.keepalive)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let watcher = makeClient(broker)
        let presence = try await connected(watcher)
        try await watcher.subscribe("im/u/rita/presence/+", qos: .atLeastOnce)

        let rita = try await TestDevice.connect(port: gateway.port)
        try await rita.login(token: try await minter.mint(user: "rita"), device: "phone")
        #expect(try await presence.next(within: 10, "rita online").payloadString.contains(#""online""#))

        // Rita gets one message and does not ACK it.
        let heldID = try await hold(held, for: rita, gateway: gateway, broker: broker, minter: minter)

        // End the session.
        var again: TestDevice?
        switch ending {
        case .logout:
            let sequence = try await rita.send(.logout(Logout()))
            let (_, reply) = try await rita.next(within: Self.prompt, "the LOGOUT ACK")
            guard case .ack(let ack) = reply else {
                Issue.record("expected the LOGOUT ACK, got \(reply)")
                return
            }
            #expect(ack.sequence == sequence)
        case .drop:
            await rita.drop()
        case .takeover:
            let started = ContinuousClock.now
            let device = try await TestDevice.connect(port: gateway.port)
            try await device.login(token: try await minter.mint(user: "rita"), device: "phone")
            #expect(ContinuousClock.now - started < .seconds(Self.prompt), "the takeover login is answered at once")
            var kicked = false
            while let frame = try? await rita.frames.next(within: Self.prompt, "the old connection's KICK") {
                if case .kick(let kick)? = try? IMMessage(frame: frame) { kicked = kick.reason == .sessionTakenOver }
            }
            #expect(kicked, "the old connection gets KICK SESSION_TAKEN_OVER")
            again = device
        case .sigterm:
            let took = await gateway.stop(within: .seconds(10))
            #expect(took != nil && took! < .seconds(5), "imgw exits within 5 s of SIGTERM (took \(took.map { "\($0)" } ?? "over 10 s"))")
            gateway = try await IMGWProcess.start(broker: broker, keepalive: Self.keepalive)
        }

        if ending != .takeover {
            let offline = try await presence.next(within: Self.prompt, "rita offline at once")
            #expect(offline.payloadString.contains(#""offline""#), "\(offline.payloadString)")
        }

        // The same device logs in again at once and gets the held message again.
        if again == nil {
            let started = ContinuousClock.now
            let device = try await TestDevice.connect(port: gateway.port)
            try await device.login(token: try await minter.mint(user: "rita"), device: "phone")
            #expect(ContinuousClock.now - started < .seconds(Self.prompt), "the next login is answered at once")
            again = device
        }
        let device = try #require(again)
        let (frame, redelivered) = try await nextHeld(held, on: device)
        #expect(redelivered == heldID, "the unACKed message comes again")
        try await device.ack(frame)

        if ending == .takeover {
            // The new session announces itself (a resumed session once the device has ACKed
            // what was waiting), whatever the old one's end said.
            var status = ""
            while !status.contains(#""online""#) {
                status = try await presence.next(within: Self.prompt, "rita online again after the takeover").payloadString
            }
        }

        // Nothing stays counted once the last device has gone.
        try await device.send(.logout(Logout()))
        _ = try await device.next(within: Self.prompt, "the LOGOUT ACK")
        try await expectNoConnections(gateway)

        let took = await gateway.stop(within: .seconds(10))
        #expect(took != nil && took! < .seconds(5), "imgw exits within 5 s of SIGTERM (took \(took.map { "\($0)" } ?? "over 10 s"))")
        await watcher.close()
        await broker.stop()
    }

    @Test("SIGTERM with devices connected that have not logged in (one silent, one after HELLO): they are told, imgw exits within 5 s", arguments: BrokerKind.allCases)
    func sigtermBeforeLogin(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let gateway = try await IMGWProcess.start(broker: broker)
        let silent = try await TestDevice.connect(port: gateway.port)
        let greeting = try await TestDevice.connect(port: gateway.port)
        try await greeting.send(.hello(Hello(features: [.zlib])))
        _ = try await greeting.next(within: 10, "HELLO_OK")

        let took = await gateway.stop(within: .seconds(10))
        #expect(took != nil && took! < .seconds(5), "imgw exits within 5 s of SIGTERM (took \(took.map { "\($0)" } ?? "over 10 s"); the login timeout is 10 s)")
        for device in [silent, greeting] {
            // Not logged in: an ERROR, not a KICK (PROTOCOL.md 6.9 and 7).
            var told = false
            while let frame = try? await device.frames.next(within: 5, "the shutdown notice") {
                if case .error(let notice)? = try? IMMessage(frame: frame) { told = notice.code == .serverShuttingDown }
            }
            #expect(told, "ERROR SERVER_SHUTTING_DOWN before the close")
        }
        await broker.stop()
    }

    /// Has `rita` receive one message of the kind `held` says, and returns its id (chat)
    /// or payload (pub/sub), unACKed.
    private func hold(_ held: Held, for rita: TestDevice, gateway: IMGWProcess, broker: some BrokerUnderTest, minter: TokenMinter) async throws -> String {
        let id = "held-\(held.rawValue)"
        if held.isChat {
            let sam = try await TestDevice.connect(port: gateway.port)
            try await sam.login(token: try await minter.mint(user: "sam"), device: "phone")
            let sequence = try await sam.send(.chat(ChatSend(to: "rita", messageID: id, content: .text("hold me"), qos: held.qos)))
            while true {
                let (_, message) = try await sam.next(within: 10, "the ACK of the chat")
                if case .ack(let ack) = message, ack.sequence == sequence {
                    #expect(ack.error == nil)
                    break
                }
            }
            await sam.drop()
        } else {
            let sequence = try await rita.send(.subscribe(Subscribe(subscriptions: [.init(filter: "im/t/news", qos: held.qos)])))
            let (_, reply) = try await rita.next(within: 10, "the SUBSCRIBE ACK")
            guard case .ack(let ack) = reply, ack.sequence == sequence, ack.error == nil else {
                throw TestError("SUBSCRIBE refused: \(reply)")
            }
            let publisher = makeClient(broker)
            try await publisher.connect()
            try await publisher.publish(topic: "im/t/news", string: id, qos: held.qos == .atLeastOnce ? .atLeastOnce : .exactlyOnce)
            await publisher.close()
        }
        let (_, received) = try await nextHeld(held, on: rita)
        #expect(received == id)
        return received
    }

    /// The next chat delivery (its message id) or pub/sub message (its payload) on `device`,
    /// skipping anything else.
    private func nextHeld(_ held: Held, on device: TestDevice) async throws -> (IMFrame, String) {
        while true {
            let (frame, message) = try await device.next(within: 10, "the held \(held.rawValue) message")
            switch message {
            case .delivery(let delivery) where held.isChat:
                return (frame, delivery.messageID)
            case .publish(let publish) where !held.isChat:
                return (frame, String(buffer: publish.payload))
            default:
                continue
            }
        }
    }

    /// imgw's connection and logged-in gauges come back to zero (polled: there is no event
    /// to wait for from outside the process).
    private func expectNoConnections(_ gateway: IMGWProcess) async throws {
        var connections = -1.0
        var loggedIn = -1.0
        let deadline = ContinuousClock.now + .seconds(Self.prompt)
        repeat {
            connections = try await gateway.metric("imgw_connections")
            loggedIn = try await gateway.metric("imgw_logged_in")
            if connections == 0 && loggedIn == 0 { return }
            try await Task.sleep(for: .milliseconds(50))
        } while ContinuousClock.now < deadline
        Issue.record("imgw still counts \(connections) connections, \(loggedIn) logged in")
    }
}
