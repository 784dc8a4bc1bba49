import Foundation
import Synchronization

/// The users whose tokens issued before some time are refused: what the server API's
/// `revoke_tokens` wrote, as this gateway has read it from the retained
/// `{prefix}/u/{user}/revoked` (``ControlClient``). Consulted at LOGIN and TOKEN_REFRESH.
///
/// Times are whole seconds, like a token's `iat`: a revocation at 12:00:00.700 refuses the
/// tokens issued before 12:00:00, so that one issued right after it (in the same second) works.
final class TokenRevocations: Sendable {
    private let cutoffs = Mutex<[String: Int64]>([:])

    /// Refuses `user`'s tokens issued before `cutoff` (Unix seconds); a later revocation
    /// of the same user moves the cutoff on, an earlier one is ignored.
    func revoke(user: String, issuedBefore cutoff: Int64) {
        cutoffs.withLock { $0[user] = max($0[user] ?? cutoff, cutoff) }
    }

    /// Forgets `user`'s revocation (it expired on the broker).
    func forget(user: String) {
        cutoffs.withLock { _ = $0.removeValue(forKey: user) }
    }

    /// The cutoff for `user`, if their tokens were revoked.
    func cutoff(user: String) -> Int64? {
        cutoffs.withLock { $0[user] }
    }

    /// Why `token` is refused, or nil if it is not revoked.
    func refusal(of token: AuthenticatedDevice) -> String? {
        guard let cutoff = cutoff(user: token.userID) else { return nil }
        let revokedAt = Date(timeIntervalSince1970: TimeInterval(cutoff))
        guard let issued = token.issuedAt else {
            return "the tokens of \(token.userID) issued before \(revokedAt) were revoked, and this one has no iat"
        }
        guard Int64(issued.timeIntervalSince1970.rounded(.down)) < cutoff else { return nil }
        return "the token was issued at \(issued), and the tokens of \(token.userID) issued before \(revokedAt) were revoked"
    }
}
