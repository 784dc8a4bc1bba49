import Foundation
import IMClient
import Synchronization
import IMGateway
import IMWire
import Testing
import IMTestSupport

/// A session lasts as long as its token (PROTOCOL.md 6.9): past its expiry plus the
/// configured leeway the device is kicked with TOKEN_EXPIRED, and its connection closes.
@Suite("Gateway: token expiry ends the session", .stopsWhatItStarts, .timeLimit(.minutes(2)))
struct TokenExpiryTests {
    @Test("a token that expires while logged in: KICK TOKEN_EXPIRED with the LOGIN's session id, then close")
    func kickedAtExpiry() async throws {
        let gateway = try await TestGateway.start { $0.auth.leeway = 0 }
        let alice = try await gateway.device("alice", device: "phone")
        let bob = try await TestDevice.connect(port: gateway.port)
        try await bob.send(.login(LoginRequest(token: try await gateway.minter.mint(user: "bob", validFor: 5), deviceID: "phone")), sessionID: 42)
        let (okFrame, ok) = try await bob.next(within: 10, "LOGIN_OK")
        guard case .loginOK(let loggedIn) = ok, let expiry = loggedIn.tokenExpiry else {
            Issue.record("expected LOGIN_OK with the token's expiry, got \(ok)")
            return
        }
        #expect(okFrame.header.sessionID == 42)
        // While the token holds, chat reaches bob.
        _ = try await alice.chat(to: "bob", id: "before", text: "hi")
        let (deliveryFrame, delivery) = try await bob.next(within: 10, "the delivery")
        guard case .delivery(let chat) = delivery else {
            Issue.record("expected a delivery, got \(delivery)")
            return
        }
        #expect(chat.messageID == "before")
        #expect(deliveryFrame.header.sessionID == 42)
        try await bob.ack(deliveryFrame)
        // Nothing else is sent: the idle timeout (90 s) is far off, only the token can end it.
        let (kickFrame, next) = try await bob.next(within: 10, "the kick")
        // Within a second of the expiry (leeway 0 here), not before it.
        let late = Date().timeIntervalSince1970 - Double(expiry) / 1000
        #expect(late >= -0.05 && late < 1, "the kick came \(late) s after the token's expiry")
        let kick: (IMFrame, Kick)? = if case .kick(let notice) = next { (kickFrame, notice) } else { nil }
        #expect(kick?.1.reason == .tokenExpired)
        #expect(kick?.0.header.sessionID == 42, "what the gateway sends on its own carries the LOGIN's session id")
        await #expect(throws: TestError.self) { _ = try await bob.frames.next(within: 10, "the close") }
        await gateway.stop()
    }

    @Test("the login deadline's ERROR carries the session id of the client's last frame")
    func loginTimeoutSessionID() async throws {
        // 3 s: room for the heartbeat to go out first on a loaded machine.
        let gateway = try await TestGateway.start { $0.limits.loginTimeout = 3 }
        let device = try await TestDevice.connect(port: gateway.port)
        try await device.send(.heartbeat, sessionID: 7)
        var notice: (IMFrame, ErrorNotice)?
        while notice == nil {
            let (frame, message) = try await device.next(within: 10, "the heartbeat ACK, then the timeout")
            if case .error(let error) = message { notice = (frame, error) }
        }
        #expect(notice?.1.code == .loginTimeout)
        #expect(notice?.1.message == "no login within 3 s")
        #expect(notice?.0.header.sessionID == 7)
        await gateway.stop()
    }
}

/// IMClient keeps its session past its token's expiry by refreshing it (PROTOCOL.md 6.1.1).
@Suite("IMClient: token refresh through a gateway", .stopsWhatItStarts, .timeLimit(.minutes(2)))
struct TokenRefreshIntegrationTests {
    @Test("a client with a token provider outlives several short tokens (6 s); chat still flows and it was never kicked")
    func refreshesBeforeExpiry() async throws {
        // Tokens of 6 s and 3 s of leeway: the client refreshes at 80% of the lifetime (4.8 s),
        // 4.2 s before the gateway would kick it, a margin a loaded machine keeps.
        let gateway = try await TestGateway.start { $0.auth.leeway = 3 }
        let minter = gateway.minter
        let minted = ProviderCalls()
        var configuration = IMClient.Configuration(port: gateway.port, token: try await minter.mint(user: "bob", validFor: 6), deviceID: "phone")
        configuration.tokenProvider = {
            minted.add()
            return try await minter.mint(user: "bob", validFor: 6)
        }
        let bob = try await IMClient.connect(configuration)
        TestResources.track { await bob.close() }
        let bobEvents = Collector(bob.events)
        let alice = try await gateway.device("alice", device: "phone")
        // Past two lifetimes of the first token (6 s + 3 s each): only refreshes keep the
        // session; each chat shows it is still there.
        for round in 1...9 {
            _ = try await alice.chat(to: "bob", id: "r-\(round)", text: "round \(round)")
            var received: IMClient.Message?
            while received == nil {
                let event = try await bobEvents.next(within: 10, "round \(round)'s message")
                switch event {
                case .message(let message): received = message
                case .disconnected, .reconnecting, .kicked: Issue.record("bob's session was interrupted in round \(round): \(event)")
                default: continue
                }
            }
            #expect(received?.messageID == "r-\(round)")
            try await Task.sleep(for: .seconds(2))
        }
        #expect(minted.value >= 2, "the provider was asked for each refresh")
        await bob.close()
        await gateway.stop()
    }
}

/// A count shared with a token provider.
final class ProviderCalls: Sendable {
    private let count = Mutex(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
