import IMWire
import NIOCore
import NIOEmbedded
import Testing

@testable import IMClient

/// IMClient against a scripted gateway: an embedded channel whose frames the test reads
/// and writes.
@Suite("IMClient over an embedded channel", .timeLimit(.minutes(1)))
struct IMClientEmbeddedTests {
    @Test("login, then send: returns with the ACK's server time; a negative ACK throws refused")
    func sendAndRefusal() async throws {
        let gateway = try await ScriptedGateway.make()
        let client = try await gateway.login()
        #expect(client.session.userID == "alice")
        #expect(client.session.heartbeatInterval == .seconds(300))

        async let sent = client.send(to: "bob", text: "hi", messageID: "m-1")
        let (frame, message) = try await gateway.next()
        guard case .chat(let chat) = message else {
            Issue.record("expected CHAT, got \(message)")
            return
        }
        #expect(chat.to == "bob")
        #expect(chat.messageID == "m-1")
        #expect(chat.content.text == "hi")
        #expect(frame.header.sessionID == IMClient.sessionID)
        try await gateway.write(.ack(Ack(sequence: frame.header.sequence, messageID: "m-1", serverTime: 1_700_000_000_123)))
        #expect(try await sent == IMClient.SendReceipt(messageID: "m-1", serverTime: 1_700_000_000_123))

        let refused = Task { try await client.send(to: "bob", text: "again") }
        let (second, _) = try await gateway.next()
        #expect(second.header.sequence != frame.header.sequence)
        try await gateway.write(.ack(.refusing(sequence: second.header.sequence, code: .rateLimited, message: "slow down")))
        await #expect(throws: IMClientError.refused(.rateLimited, "slow down")) { try await refused.value }
        await client.close()
    }

    @Test("a delivery is surfaced and ACKed; its redelivery is ACKed and not surfaced again")
    func deliveries() async throws {
        let gateway = try await ScriptedGateway.make()
        let client = try await gateway.login()
        let delivery = ChatDelivery(from: "bob", messageID: "d-1", serverTime: 5, content: .text("hello"))
        try await gateway.write(.delivery(delivery), sequence: 40)
        var resent = delivery
        resent.resend = true
        try await gateway.write(.delivery(resent), sequence: 41)
        try await gateway.write(.presence(PresenceNotice(user: "bob", device: "phone", status: .online)), sequence: 42)

        var events = client.events.makeAsyncIterator()
        #expect(await events.next() == .message(IMClient.Message(from: "bob", messageID: "d-1", content: .text("hello"), serverTime: 5)))
        #expect(await events.next() == .presence(IMClient.Presence(user: "bob", device: "phone", status: .online)), "no second message")
        let acks = [try await gateway.next().0, try await gateway.next().0]
        #expect(acks.map(\.header.type) == [.ack, .ack])
        #expect(acks.map(\.header.sequence) == [40, 41])
        await client.close()
        #expect(await events.next() == nil, "close finishes the events, without .disconnected")
    }

    @Test("login refused: the gateway's code and message")
    func loginRefused() async throws {
        let gateway = try await ScriptedGateway.make()
        let client = Task { try await IMClient.connect(gateway.configuration, over: gateway.async) }
        let (login, message) = try await gateway.next()
        guard case .login(let request) = message else {
            Issue.record("expected LOGIN, got \(message)")
            return
        }
        #expect(request.token == "token")
        #expect(request.deviceID == "phone")
        try await gateway.write(.error(ErrorNotice(code: .tokenExpired, message: "expired", refSequence: login.header.sequence)))
        await #expect(throws: IMClientError.loginRefused(.tokenExpired, "expired")) { try await client.value }
    }

    @Test("no ACK in time throws timeout; the connection stays usable")
    func timeout() async throws {
        var gateway = try await ScriptedGateway.make()
        gateway.configuration.ackTimeout = .seconds(1)
        let client = try await gateway.login()
        await #expect(throws: IMClientError.timeout) { try await client.watchPresence(["bob"]) }
        _ = try await gateway.next()
        async let watched: Void = client.watchPresence(["carol"])
        let (frame, _) = try await gateway.next()
        try await gateway.write(.ack(Ack(sequence: frame.header.sequence)))
        try await watched
        await client.close()
    }

    @Test("heartbeats when idle; a silent gateway is declared dead: requests and events end")
    func heartbeatAndDeadConnection() async throws {
        var gateway = try await ScriptedGateway.make()
        gateway.configuration.heartbeatInterval = .milliseconds(500)
        let client = try await gateway.login()
        #expect(client.session.heartbeatInterval == .milliseconds(500), "the configuration wins over LOGIN_OK")
        let (beat, _) = try await gateway.next()
        #expect(beat.header.type == .heartbeat)
        #expect(beat.body.readableBytes == 0)
        // Nothing comes back: after two intervals and a margin the client gives up.
        var events = client.events.makeAsyncIterator()
        #expect(await events.next() == .disconnected)
        #expect(await events.next() == nil)
        await #expect(throws: IMClientError.disconnected) { try await client.send(to: "bob", text: "late") }
    }

    @Test("a request in flight when the connection drops throws disconnected")
    func dropInFlight() async throws {
        let gateway = try await ScriptedGateway.make()
        let client = try await gateway.login()
        let sent = Task { try await client.send(to: "bob", text: "x") }
        _ = try await gateway.next()
        try await gateway.channel.close()
        await #expect(throws: IMClientError.disconnected) { try await sent.value }
        var events = client.events.makeAsyncIterator()
        #expect(await events.next() == .disconnected)
    }
}

/// The gateway side of an embedded channel carrying frames (no codec).
struct ScriptedGateway {
    let channel: NIOAsyncTestingChannel
    let async: NIOAsyncChannel<IMFrame, IMFrame>
    var configuration = IMClient.Configuration(token: "token", deviceID: "phone")

    static func make() async throws -> ScriptedGateway {
        let channel = NIOAsyncTestingChannel()
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 6969)).get()
        let async = try await channel.testingEventLoop.executeInContext {
            try NIOAsyncChannel<IMFrame, IMFrame>(wrappingChannelSynchronously: channel)
        }
        return ScriptedGateway(channel: channel, async: async)
    }

    /// The next frame the client wrote, decoded.
    func next() async throws -> (IMFrame, IMMessage) {
        let frame = try await channel.waitForOutboundWrite(as: IMFrame.self)
        return (frame, try IMMessage(frame: frame))
    }

    func write(_ message: IMMessage, sequence: UInt32 = 1) async throws {
        try await channel.writeInbound(message.frame(sequence: sequence, timestamp: 1_700_000_000, sessionID: IMClient.sessionID))
    }

    /// Connects a client and answers its LOGIN with LOGIN_OK for alice.
    func login() async throws -> IMClient {
        async let client = IMClient.connect(configuration, over: async)
        let (frame, message) = try await next()
        guard case .login = message else { throw IMClientError.protocolViolation("expected LOGIN, got \(message)") }
        try await write(.loginOK(LoginOK(userID: "alice", deviceID: "phone", serverTime: 1, heartbeatInterval: 300, refSequence: frame.header.sequence)))
        return try await client
    }
}
