#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import IMWire

// The session's token: refreshed by hand or on TokenRefreshSchedule's plan (PROTOCOL.md 6.1.1).
extension IMClient {
    /// Hands the gateway a newer token for this session (TOKEN_REFRESH), so that it does not
    /// end when the current one expires; later LOGINs (after a reconnect) use it too. With a
    /// ``Configuration/tokenProvider`` the client does this on its own; this is for apps that
    /// get their tokens some other way, or want a refresh now.
    ///
    /// - Parameter token: An HS256 JWT for the session's user (and device, if it names one).
    ///   It need not outlive the current token: the session then ends at its expiry.
    /// - Returns: When the new token expires, as the gateway read it (its `exp` claim).
    /// - Throws: ``IMClientError/refused(_:_:)`` (AUTH_FAILED: bad signature or malformed;
    ///   TOKEN_EXPIRED: the token already expired; FORBIDDEN: another user's token, or bound
    ///   to another device; BAD_REQUEST: empty or longer than 8192 bytes): the session goes
    ///   on with the current token until it expires. ``IMClientError/timeout``,
    ///   ``IMClientError/disconnected`` (not connected now: a refresh is not kept for the
    ///   next connection), or ``IMClientError/protocolViolation(_:)`` if the gateway's ACK
    ///   named no expiry (the token is taken all the same).
    @discardableResult
    public func refreshToken(_ token: String) async throws(IMClientError) -> Date {
        guard let expiry = try await sendTokenRefresh(token) else {
            throw .protocolViolation("the ACK of TOKEN_REFRESH carries no TOKEN_EXPIRY")
        }
        return Date(timeIntervalSince1970: Double(expiry) / 1000)
    }

    /// Sends TOKEN_REFRESH with `token` and waits for its ACK. Positive: `token` is the one
    /// for later LOGINs and the schedule starts again from the new expiry, which is returned.
    func sendTokenRefresh(_ token: String) async throws(IMClientError) -> UInt64? {
        let ack = try await request(.tokenRefresh(TokenRefresh(token: token)), priority: .chat, durable: false, timeout: configuration.ackTimeout)
        newestToken = token
        tokenExpired = false
        tokenSchedule.refreshed(tokenExpiry: ack.tokenExpiry, serverTime: ack.serverTime, now: clock.now)
        schedule()
        return ack.tokenExpiry
    }

    /// Starts the refresh the schedule says is due: a token from the provider, then
    /// TOKEN_REFRESH (at most one at a time).
    func refreshTokenIfDue(now: ContinuousClock.Instant) {
        guard machine.state == .connected, let provider = configuration.tokenProvider,
            tokenSchedule.nextAction(now: now) == .refresh
        else { return }
        tokenSchedule.refreshStarted()
        let generation = self.generation
        Task { [weak self] in
            let fetched: Result<String, any Error>
            do { fetched = .success(try await provider()) } catch { fetched = .failure(error) }
            await self?.refreshAutomatically(with: fetched, generation: generation)
        }
    }

    /// The provider answered: send its token; a failure of either is retried per the
    /// schedule. Nothing is done for a connection that is gone (the next LOGIN_OK plans anew).
    private func refreshAutomatically(with fetched: Result<String, any Error>, generation: Int) async {
        guard generation == self.generation, machine.state == .connected else { return }
        do {
            _ = try await sendTokenRefresh(try fetched.get())
        } catch {
            guard generation == self.generation, machine.state == .connected else { return }
            tokenSchedule.refreshFailed(now: clock.now, using: &random)
            schedule()
        }
    }
}
