import Foundation
import Synchronization

/// Message ids each user's devices already had accepted (PROTOCOL.md 6.3: a resend of an
/// accepted id is ACKed without publishing again; an id reused for another message is
/// refused). One per gateway process, keyed by user: every device of the user logged in on
/// this process shares it, devices on other gateways do not. A lock, not an actor: checked
/// and recorded for every chat message, it must not cost two task hops each.
final class DedupStore: Sendable {
    private let window = Mutex(DedupWindow())

    /// What an earlier acceptance of `id` from `user`, if any, says of the message with
    /// `fingerprint`; a duplicate always carries a server time.
    func check(user: String, id: String, fingerprint: ChatFingerprint) -> DedupDecision {
        let now = Date.now.timeIntervalSince1970
        switch window.withLock({ $0.check(sender: user, id: id, fingerprint: fingerprint, now: now) }) {
        case .duplicate(nil): return .duplicate(serverTime: unixMilliseconds())
        case let decision: return decision
        }
    }

    func record(user: String, id: String, fingerprint: ChatFingerprint, serverTime: UInt64) {
        let now = Date.now.timeIntervalSince1970
        window.withLock { $0.record(sender: user, id: id, fingerprint: fingerprint, serverTime: serverTime, now: now) }
    }
}
