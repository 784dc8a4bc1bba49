/// How fast one connection may send chat messages: a token bucket of `burst`, refilled at
/// `ratePerSecond`.
///
/// Once it refuses a message it refuses every message until the retry time it announced has
/// passed **and** the refused message comes again (or, for a client that gave it up,
/// ``longestHold`` after the retry time). A device pipelines its chats: those it wrote after
/// the refused one arrive refused too, however late they arrive, so nothing sent after a
/// refused message is taken ahead of it, and the device sends them all again in their order.
struct ChatRateLimit: Sendable {
    enum Decision: Sendable, Hashable {
        case allow
        /// Refused: send again in this many milliseconds (at least 1).
        case refuse(retryAfterMilliseconds: UInt32)
        /// Refused because an earlier message could not be stored (``hold(messageID:retryAfterMilliseconds:now:)``):
        /// send again in this many milliseconds.
        case held(retryAfterMilliseconds: UInt32)
    }

    /// How long past the retry time the limit waits for the first refused message.
    static let longestHold = 2.0

    /// Refusals in a row the device ignored: it sent something else once the retry time had
    /// passed, or gave the refused message up. Back to 0 when it sends the refused message
    /// again, as the protocol asks. (The connection pauses reading longer the more there are.)
    private(set) var ignoredRefusals = 0

    /// nil: no limit.
    private var bucket: RateLimiter?
    /// Refusing everything: until when at least (seconds on the caller's clock), and the
    /// message whose return reopens.
    private var closed: Closed?

    private struct Closed: Sendable {
        var until: Double
        var firstRefused: String
        /// Closed by ``hold(messageID:retryAfterMilliseconds:now:)``, not by the rate.
        var byStore = false
        /// Counted in ``ignoredRefusals`` already.
        var ignored = false
    }

    /// A limit of `ratePerSecond` (0: none) with `burst` messages back to back.
    init(ratePerSecond: Double, burst: Int) {
        self.bucket = ratePerSecond > 0 ? RateLimiter(ratePerSecond: ratePerSecond, burst: Double(max(1, burst))) : nil
    }

    /// Whether the chat message `messageID` arriving at `now` (seconds, monotonic; read only
    /// when there is a limit) may go.
    mutating func admit(messageID: String, now readNow: @autoclosure () -> Double) -> Decision {
        guard bucket != nil || closed != nil else { return .allow }
        let now = readNow()
        if var closed {
            let resent = now >= closed.until && messageID == closed.firstRefused
            let gaveUp = now >= closed.until + Self.longestHold
            if !resent, now >= closed.until, !closed.byStore, !closed.ignored {
                // Past the retry time, and not the refused message: RETRY_AFTER ignored.
                closed.ignored = true
                self.ignoredRefusals += 1
                self.closed = closed
            }
            guard resent || gaveUp else {
                let wait = Self.milliseconds(closed.until - now)
                return closed.byStore ? .held(retryAfterMilliseconds: wait) : .refuse(retryAfterMilliseconds: wait)
            }
            if resent { self.ignoredRefusals = 0 }
            self.closed = nil
        }
        guard var bucket else { return .allow }
        defer { self.bucket = bucket }
        // (A hair under one token: at the announced retry time the token is there even
        // after floating-point rounding.)
        if bucket.allow(now: now, cost: 1 - 1e-9) { return .allow }
        // Until the bucket holds a whole token again.
        let wait = max(0.001, (1 - bucket.available(now: now)) / bucket.ratePerSecond)
        self.closed = Closed(until: now + wait, firstRefused: messageID)
        return .refuse(retryAfterMilliseconds: Self.milliseconds(wait))
    }

    /// `messageID` was refused elsewhere (the archive could not store it) with a retry time:
    /// from `now` on, chats are refused as after a refusal of the limit's own, until the retry
    /// time has passed and the first refused message comes again. A hold already running
    /// keeps its first message.
    mutating func hold(messageID: String, retryAfterMilliseconds: UInt32, now: Double) {
        guard closed == nil else { return }
        closed = Closed(until: now + Double(retryAfterMilliseconds) / 1000, firstRefused: messageID, byStore: true)
    }

    private static func milliseconds(_ seconds: Double) -> UInt32 {
        UInt32(clamping: max(1, Int((seconds * 1000).rounded(.up))))
    }
}
