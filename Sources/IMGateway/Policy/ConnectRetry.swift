import Mosquitto

/// Whether a login tries the broker's CONNECT again after a refusal, and when.
///
/// A refusal that can pass is tried again after a growing delay, while the login's time
/// allows: 0x80 Unspecified error (ejabberd 23.01 refuses a device's session this way while
/// another node is still taking it over, or for about a minute after two nodes tried at once),
/// 0x88 Server unavailable and 0x89 Server busy. Any other refusal (bad credentials, not
/// authorized, a banned client) or a connection error is final at once.
struct ConnectRetry: Sendable, Hashable {
    /// The delays before the second, third... try.
    static let delays: [Duration] = [.milliseconds(100), .milliseconds(300), .seconds(1), .seconds(2), .seconds(4)]

    /// When the login must have its answer; no try starts after `deadline` minus
    /// ``reserve``.
    let deadline: ContinuousClock.Instant
    /// Time kept for what follows CONNECT (SUBSCRIBE, the presence) and the device's answer.
    static let reserve: Duration = .seconds(1)
    /// Tries made so far.
    private(set) var tries = 1

    init(deadline: ContinuousClock.Instant) {
        self.deadline = deadline
    }

    /// Whether the broker may take a later CONNECT after refusing one with `error`.
    static func mayPass(_ error: any Error) -> Bool {
        guard case MosquittoError.connectionRefused(let reason) = error else { return false }
        return reason == .unspecifiedError || reason == .serverUnavailable || reason == .serverBusy
    }

    /// How long to wait before trying again after `error`, at `now`; `nil` when the refusal is
    /// final, the delays are used up, or the deadline leaves no room.
    mutating func delay(after error: any Error, now: ContinuousClock.Instant) -> Duration? {
        guard Self.mayPass(error), tries <= Self.delays.count else { return nil }
        let delay = Self.delays[tries - 1]
        guard now + delay + Self.reserve <= deadline else { return nil }
        tries += 1
        return delay
    }
}
