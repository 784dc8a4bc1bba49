import NIOCore

/// How fast one logged-in device may send chat messages, TYPING signals and positions, and
/// how long its reads pause after it is refused, all on the event loop's clock (the time of
/// the frame's event). Part of ``ConnectionStateMachine``.
struct DeviceRateLimits: Sendable {
    /// What becomes of a chat message.
    enum ChatVerdict: Sendable, Hashable {
        /// It may go.
        case allow
        /// Refused (RATE_LIMITED, RETRY_AFTER `retryAfter` ms): nothing more is read from the
        /// device before `pauseUntil`.
        case refuse(retryAfter: UInt32, pauseUntil: NIODeadline)
        /// Refused: an earlier message could not be stored, and comes first (STORE_UNAVAILABLE).
        case held(retryAfter: UInt32)
    }

    /// TYPING signals a connection may send per second (8 back to back, PROTOCOL.md 6.13).
    static var typingRate: Int { 4 }

    private var chat: ChatRateLimit
    private var typing = RateLimiter(ratePerSecond: Double(Self.typingRate), burst: 8)
    private var location: RateLimiter
    /// `limits.chat_rate` and `limits.chat_burst`.
    let chatRate: Double
    let chatBurst: Int

    /// `chatRate` messages a second (0: no limit), `chatBurst` back to back; `locationRate`
    /// positions a second.
    init(chatRate: Double, chatBurst: Int, locationRate: Double) {
        self.chat = ChatRateLimit(ratePerSecond: chatRate, burst: chatBurst)
        self.location = RateLimiter(ratePerSecond: locationRate, burst: max(1, locationRate))
        self.chatRate = chatRate
        self.chatBurst = chatBurst
    }

    /// Whether the chat message `messageID`, arriving at `now`, may go. A refused device is
    /// not read until the retry time, and not before its bucket could refill (at most 1 s):
    /// one that honours RETRY_AFTER loses no throughput (its tokens wait for it), one that
    /// ignores it costs a read a pause instead of a refusal a frame, and the pause doubles
    /// each time it ignores one more (up to 16 s).
    mutating func admitChat(messageID: String, now: NIODeadline) -> ChatVerdict {
        switch self.chat.admit(messageID: messageID, now: Self.seconds(now)) {
        case .allow:
            return .allow
        case .held(let wait):
            return .held(retryAfter: wait)
        case .refuse(let wait):
            let refill = self.chatRate > 0 ? min(1, Double(self.chatBurst) / self.chatRate) : 0
            let pause = max(Double(wait) / 1000, refill) * Double(1 << min(self.chat.ignoredRefusals, 4))
            return .refuse(retryAfter: wait, pauseUntil: now + .nanoseconds(Int64(pause * 1e9)))
        }
    }

    /// The chat message `messageID` could not be stored: it, and everything after it, is
    /// refused until it comes again after `retryAfter` ms.
    mutating func hold(messageID: String, retryAfter: UInt32, now: NIODeadline) {
        self.chat.hold(messageID: messageID, retryAfterMilliseconds: retryAfter, now: Self.seconds(now))
    }

    /// A TYPING signal at `now`: `nil` if it may go, else the milliseconds to wait.
    mutating func admitTyping(now: NIODeadline) -> UInt32? {
        let seconds = Self.seconds(now)
        guard !self.typing.allow(now: seconds) else { return nil }
        let wait = ((1 - self.typing.available(now: seconds)) / Double(Self.typingRate) * 1000).rounded(.up)
        return max(UInt32(wait), 1)
    }

    /// Whether a position at `now` may go.
    mutating func admitLocation(now: NIODeadline) -> Bool {
        self.location.allow(now: Self.seconds(now))
    }

    private static func seconds(_ deadline: NIODeadline) -> Double {
        Double(deadline.uptimeNanoseconds) / 1e9
    }
}
