import Mosquitto

/// Whether a login tries the broker's CONNECT again after a refusal or a failed connection,
/// and when.
///
/// A refusal that can pass is tried again after a growing delay, while the login's time
/// allows: 0x80 Unspecified error (ejabberd 23.01 refuses a device's session this way while
/// another node is still taking it over, or for about a minute after two nodes tried at once),
/// 0x88 Server unavailable and 0x89 Server busy. A broker that cannot be reached (nothing
/// listens: it is restarting; no CONNACK in time: it is stopped; the connection lost before
/// the session's subscriptions were made) is tried again every
/// ``unreachableDelay``: the device waits in its login and is in as soon as the broker is
/// back, instead of being refused and backing off further at each failure. Any other refusal
/// (bad credentials, not authorized, a banned client) is final at once.
struct ConnectRetry: Sendable, Hashable {
    /// The delays before the second, third... try after a refusal.
    static let delays: [Duration] = [.milliseconds(100), .milliseconds(300), .seconds(1), .seconds(2), .seconds(4)]
    /// The delay before each try after a broker that could not be reached.
    static let unreachableDelay: Duration = .milliseconds(250)

    /// When the login must have its answer; no try starts after `deadline` minus
    /// ``reserve``.
    let deadline: ContinuousClock.Instant
    /// Time kept for what follows CONNECT (SUBSCRIBE, the presence) and the device's answer.
    static let reserve: Duration = .seconds(1)
    /// Tries made so far.
    private(set) var tries = 1
    /// Tries after refusals (they use up ``delays``).
    private var refusals = 0

    init(deadline: ContinuousClock.Instant) {
        self.deadline = deadline
    }

    /// Whether the broker may take a later CONNECT after refusing one with `error`.
    static func mayPass(_ error: any Error) -> Bool {
        guard case MosquittoError.connectionRefused(let reason) = error else { return false }
        return reason == .unspecifiedError || reason == .serverUnavailable || reason == .serverBusy
    }

    /// Whether `error` says the broker could not be reached (rather than refusing).
    static func isUnreachable(_ error: any Error) -> Bool {
        switch error as? MosquittoError {
        case .connectionLost(.error)?, .connectTimeout?, .notConnected?: true
        // MOSQ_ERR_ERRNO: the blocking connect (libmosquitto's internals off) refused at once.
        case .library(let code, _)? where code == 14: true
        default: false
        }
    }

    /// How long to wait before trying again after `error`, at `now`; `nil` when the refusal is
    /// final, the delays are used up, or the deadline leaves no room.
    mutating func delay(after error: any Error, now: ContinuousClock.Instant) -> Duration? {
        let delay: Duration
        if Self.isUnreachable(error) {
            delay = Self.unreachableDelay
        } else {
            guard Self.mayPass(error), refusals < Self.delays.count else { return nil }
            delay = Self.delays[refusals]
        }
        guard now + delay + Self.reserve <= deadline else { return nil }
        if !Self.isUnreachable(error) { refusals += 1 }
        tries += 1
        return delay
    }
}
