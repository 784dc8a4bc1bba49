@testable import IMGateway
import IMWire
import Mosquitto
import Testing

/// A login whose CONNECT the broker refuses (``ConnectRetry``), on a testing channel.
extension DeviceConnectionTests {
    /// Sends LOGIN for alice's phone.
    static func sendLogin(_ harness: Harness) async throws {
        let token = try await harness.minter.mint(user: "alice", validFor: 3600)
        try await harness.send(.login(LoginRequest(token: token, deviceID: "phone")))
    }

    @Test("a CONNECT refused with 0x80 is tried again on a new session: LOGIN_OK follows; the refused session is ended, and its loss does not end the new one")
    func connectRetried() async throws {
        let harness = try await Harness.start(refusing: [.unspecifiedError])
        try await Self.sendLogin(harness)
        let (_, message) = try await harness.next()
        guard case .loginOK = message else { throw Failure("expected LOGIN_OK, got \(message)") }
        var sessions = harness.sessions.makeAsyncIterator()
        guard let refused = await sessions.next(), let session = await sessions.next() else { throw Failure("two sessions expected") }
        #expect(await Self.ended(refused) == .takenOver)
        // libmosquitto reports the refused connection's end after the refusal: not this one's.
        refused.lose(.error(code: 7, message: "The connection was lost."))
        session.deliver(Self.chatMessage(from: "bob", to: "alice", id: "after-retry", deliveryID: 5))
        let (_, delivery) = try await harness.next()
        guard case .delivery(let chat) = delivery else { throw Failure("expected the delivery, got \(delivery)") }
        #expect(chat.messageID == "after-retry")
        #expect(harness.channel.isActive)
        try await harness.channel.close()
    }

    @Test("a refusal that cannot pass (0x87 Not authorized) is final: one CONNECT, ERROR BROKER_UNAVAILABLE naming it")
    func finalRefusal() async throws {
        let harness = try await Harness.start(refusing: [.notAuthorized, .notAuthorized])
        try await Self.sendLogin(harness)
        let (_, message) = try await harness.next()
        guard case .error(let error) = message else { throw Failure("expected ERROR, got \(message)") }
        #expect(error.code == .brokerUnavailable)
        #expect(error.message?.contains("Not authorized") == true, "\(error.message ?? "")")
        #expect(harness.sessionsMade.current == 1)
        try await harness.closed()
    }

    @Test("the device's connection closing stops the tries: the login gives up at once instead of after every delay")
    func retryStopsWhenClosed() async throws {
        let harness = try await Harness.start(refusing: Array(repeating: .unspecifiedError, count: 10))
        try await Self.sendLogin(harness)
        var sessions = harness.sessions.makeAsyncIterator()
        guard let first = await sessions.next() else { throw Failure("no session") }
        _ = await Self.ended(first)
        try await harness.channel.close()
        // Every delay (7.4 s in all) would keep the device registered; a login that stopped
        // unregisters it within the first delay or two.
        let start = ContinuousClock.now
        while await harness.context.registry.count > 0 {
            guard ContinuousClock.now - start < .seconds(5) else { throw Failure("the login still tries after 5 s") }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(harness.sessionsMade.current <= 2, "\(harness.sessionsMade.current) sessions")
    }
}
