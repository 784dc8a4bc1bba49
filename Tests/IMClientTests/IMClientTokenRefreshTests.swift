import IMWire
import Synchronization
import Testing

@testable import IMClient

/// Token refresh (PROTOCOL.md 6.1.1) against the scripted gateway of ``IMClientEmbeddedTests``:
/// LOGIN_OK names the token's expiry, the client asks its provider and sends TOKEN_REFRESH.
@Suite("IMClient token refresh over embedded channels", .timeLimit(.minutes(1)))
struct IMClientTokenRefreshTests {
    /// A network whose client gets its tokens from `tokens` and retries a failed refresh
    /// after 20 ms, 40 ms ... at most 100 ms.
    static func network(_ tokens: TokenSource) -> ScriptedNetwork {
        let network = ScriptedNetwork()
        network.configuration.tokenProvider = tokens.provider
        network.configuration.tokenRefresh = .init(retryBackoff: ReconnectBackoff(base: .milliseconds(20), cap: .milliseconds(100)))
        // No heartbeat among the frames these tests read, even when a busy machine holds a
        // test up for seconds.
        network.configuration.heartbeat = .init(minInterval: .seconds(120), maxInterval: .seconds(240))
        return network
    }

    @Test("TOKEN_REFRESH with the provider's token at 80% of the lifetime; its ACK plans the next; the newest token logs in after a reconnect")
    func refreshesOnSchedule() async throws {
        let tokens = TokenSource()
        let network = Self.network(tokens)
        network.configuration.tokenRefresh.margin = .zero
        let start = ContinuousClock.now
        // A token that lives 1 s by the gateway's clock: due 800 ms after LOGIN_OK.
        let (client, gateway) = try await network.login(tokenExpiry: ScriptedGateway.serverTime + 1_000)
        let (first, refresh) = try await gateway.nextTokenRefresh()
        let waited = ContinuousClock.now - start
        #expect(refresh.token == "t-1")
        #expect(waited >= .milliseconds(780), "not before 80% of the lifetime: \(waited)")
        #expect(await client.currentToken == "token", "not taken before its ACK")

        // ACKed with a token that lives another 500 ms from now: due 400 ms after the ACK.
        let acked = ContinuousClock.now
        let gatewayNow = ScriptedGateway.serverTime + UInt64((acked - start).wholeMilliseconds)
        try await gateway.write(.ack(.tokenRefreshed(sequence: first.header.sequence, tokenExpiry: gatewayNow + 500)))
        let (second, again) = try await gateway.nextTokenRefresh()
        let waitedAgain = ContinuousClock.now - acked
        #expect(again.token == "t-2")
        #expect(waitedAgain >= .milliseconds(380), "planned from the new expiry: \(waitedAgain)")
        #expect(await client.currentToken == "t-1", "the ACKed token is the newest")
        try await gateway.write(.ack(.tokenRefreshed(sequence: second.header.sequence, tokenExpiry: gatewayNow + 3_600_000)))

        // The connection drops: the next LOGIN carries the newest ACKed token, which is not
        // due yet, so the provider is not asked again.
        try await gateway.channel.close()
        let reconnected = try await network.nextDial()
        let login = try await reconnected.acceptLogin(tokenExpiry: ScriptedGateway.serverTime + 3_600_000)
        #expect(login.token == "t-2")
        #expect(tokens.calls == 2)
        await client.close()
    }

    @Test("a provider that throws and a refused refresh are retried with back-off until one is ACKed; the connection stays")
    func failuresAreRetried() async throws {
        let tokens = TokenSource(failing: [1])
        let network = Self.network(tokens)
        // 30 s left, less than the 60 s margin: due at once.
        let (client, gateway) = try await network.login(tokenExpiry: ScriptedGateway.serverTime + 30_000)

        let (first, refresh) = try await gateway.nextTokenRefresh()
        #expect(refresh.token == "t-2", "the provider's first call failed and was retried")
        try await gateway.write(.ack(.refusing(sequence: first.header.sequence, code: .tokenExpired, message: "expired")))

        let (second, again) = try await gateway.nextTokenRefresh()
        #expect(again.token == "t-3", "a new token for the retry")
        #expect(second.header.sequence != first.header.sequence)
        try await gateway.write(.ack(.tokenRefreshed(sequence: second.header.sequence, tokenExpiry: ScriptedGateway.serverTime + 3_600_000)))

        // A chat round trip: the refresh's ACK was read before the chat's, on the same connection.
        async let sent = client.send(to: "bob", text: "still here", messageID: "m-1")
        let (chat, _) = try await gateway.next()
        try await gateway.write(.ack(Ack(sequence: chat.header.sequence, messageID: "m-1", serverTime: 2)))
        #expect(try await sent.serverTime == 2)
        #expect(await client.currentToken == "t-3")
        #expect(tokens.calls == 3)
        #expect(network.dials == 1, "never reconnected for it")
        await client.close()
    }

    @Test("an unanswered refresh is given up after the ACK timeout and tried again with a new token, on the same connection")
    func unansweredIsRetried() async throws {
        let tokens = TokenSource()
        let network = Self.network(tokens)
        // Long enough that the ACK of t-2, written as soon as the test reads t-2, arrives in
        // time on a loaded machine (200 ms failed once under a parallel run: the client gave
        // t-2 up before the ACK came).
        network.configuration.ackTimeout = .seconds(1)
        let (client, gateway) = try await network.login(tokenExpiry: ScriptedGateway.serverTime + 30_000)
        // The gateway never answers t-1 (the outbox may write it twice before giving up).
        var (frame, refresh) = try await gateway.nextTokenRefresh()
        for _ in 0..<3 where refresh.token == "t-1" {
            (frame, refresh) = try await gateway.nextTokenRefresh()
        }
        #expect(refresh.token == "t-2")
        try await gateway.write(.ack(.tokenRefreshed(sequence: frame.header.sequence, tokenExpiry: ScriptedGateway.serverTime + 3_600_000)))
        try await gateway.channel.close()
        let reconnected = try await network.nextDial()
        #expect(try await reconnected.acceptLogin().token == "t-2")
        #expect(network.dials == 2, "the only reconnect is the one the test caused")
        await client.close()
    }

    @Test("KICK TOKEN_EXPIRED with a provider: reconnect with its token; a LOGIN refused as expired asks it again")
    func kickWithProvider() async throws {
        let tokens = TokenSource()
        let network = Self.network(tokens)
        let (client, gateway) = try await network.login()
        var events = client.events.makeAsyncIterator()
        try await gateway.write(.kick(Kick(reason: .tokenExpired, message: "token expired")))
        #expect(await events.next() == .kicked(.tokenExpired, "token expired"))
        guard case .reconnecting(let reconnecting) = await events.next() else {
            Issue.record("expected reconnecting")
            return
        }
        #expect(reconnecting.cause == .kicked(.tokenExpired, "token expired"))

        let second = try await network.nextDial()
        let (login, request) = try await second.login()
        #expect(request.token == "t-1")
        try await second.write(.error(ErrorNotice(code: .tokenExpired, message: "expired", refSequence: login.header.sequence)))
        guard case .reconnecting(let again) = await events.next() else {
            Issue.record("expected reconnecting after the refused LOGIN")
            return
        }
        #expect(again.cause == .loginRefused(.tokenExpired, "expired"))

        let third = try await network.nextDial()
        #expect(try await third.acceptLogin().token == "t-2")
        #expect(await events.next() == .reconnected(client.session))
        #expect(await client.currentToken == "t-2")
        await client.close()
    }

    @Test("a provider that fails when the token expired: no LOGIN with the old token, and another try later")
    func providerFailsAtLogin() async throws {
        let tokens = TokenSource(failing: [1])
        let network = Self.network(tokens)
        let (client, gateway) = try await network.login()
        var events = client.events.makeAsyncIterator()
        try await gateway.write(.kick(Kick(reason: .tokenExpired, message: nil)))
        #expect(await events.next() == .kicked(.tokenExpired, nil))
        guard case .reconnecting = await events.next() else {
            Issue.record("expected reconnecting")
            return
        }
        let second = try await network.nextDial()
        guard case .reconnecting(let reconnecting) = await events.next() else {
            Issue.record("expected reconnecting after the provider failed")
            return
        }
        guard case .loginRefused(.tokenExpired, _) = reconnecting.cause else {
            Issue.record("expected the expired token as the cause, got \(reconnecting.cause)")
            return
        }
        #expect(try await second.channel.readOutbound(as: IMFrame.self) == nil, "nothing was written: no LOGIN with the expired token")
        let third = try await network.nextDial()
        #expect(try await third.acceptLogin().token == "t-2")
        await client.close()
    }

    @Test("KICK TOKEN_EXPIRED without a provider: kicked, then disconnected, and no reconnect")
    func kickWithoutProvider() async throws {
        let network = ScriptedNetwork()
        let (client, gateway) = try await network.login(tokenExpiry: ScriptedGateway.serverTime + 1)
        var events = client.events.makeAsyncIterator()
        try await gateway.write(.kick(Kick(reason: .tokenExpired, message: nil)))
        #expect(await events.next() == .kicked(.tokenExpired, nil))
        #expect(await events.next() == .disconnected)
        #expect(await events.next() == nil)
        #expect(network.dials == 1)
    }

    @Test("refreshToken by hand: the new expiry as a Date, the token kept for the next LOGIN; a refusal throws and keeps the old one")
    func refreshByHand() async throws {
        let network = ScriptedNetwork()
        let (client, gateway) = try await network.login()
        async let expiry = client.refreshToken("manual")
        let (frame, refresh) = try await gateway.nextTokenRefresh()
        #expect(refresh.token == "manual")
        try await gateway.write(.ack(.tokenRefreshed(sequence: frame.header.sequence, tokenExpiry: 4_102_448_400_000)))
        #expect(try await expiry.timeIntervalSince1970 == 4_102_448_400)
        #expect(await client.currentToken == "manual")

        let refused = Task { try await client.refreshToken("someone-else") }
        let (second, _) = try await gateway.next()
        try await gateway.write(.ack(.refusing(sequence: second.header.sequence, code: .forbidden, message: "token for bob")))
        await #expect(throws: IMClientError.refused(.forbidden, "token for bob")) { try await refused.value }
        #expect(await client.currentToken == "manual")

        try await gateway.channel.close()
        let reconnected = try await network.nextDial()
        #expect(try await reconnected.acceptLogin().token == "manual")
        #expect(network.dials == 2)
        await client.close()
    }
}

extension ScriptedGateway {
    /// The next frame the client wrote, which must be a TOKEN_REFRESH.
    func nextTokenRefresh() async throws -> (IMFrame, TokenRefresh) {
        let (frame, message) = try await next()
        guard case .tokenRefresh(let refresh) = message else { throw IMClientError.protocolViolation("expected TOKEN_REFRESH, got \(message)") }
        return (frame, refresh)
    }
}

/// A token provider for tests: call n returns `t-n`, or throws if n is in `failing`.
final class TokenSource: Sendable {
    struct Unavailable: Error {}
    private struct State {
        var calls = 0
        var failing: Set<Int>
    }
    private let state: Mutex<State>

    init(failing: Set<Int> = []) {
        state = Mutex(State(failing: failing))
    }

    /// How many times the provider was called.
    var calls: Int { state.withLock { $0.calls } }

    var provider: @Sendable () async throws -> String {
        { [self] in
            let (call, fails) = state.withLock { state in
                state.calls += 1
                return (state.calls, state.failing.contains(state.calls))
            }
            if fails { throw Unavailable() }
            return "t-\(call)"
        }
    }
}

extension Duration {
    /// Whole milliseconds, rounded down.
    var wholeMilliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}
