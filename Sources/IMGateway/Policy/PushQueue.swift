import HeapModule

/// The offline-push notifications of one gateway, from the chat to the last POST, without I/O:
/// the ``PushNotifier`` feeds it events and does what it returns. Times are seconds on a
/// monotonic clock.
///
/// - A chat's notification waits ``Settings/delay`` (presence published by another gateway
///   must arrive first), then goes out unless a device of the recipient is online by then.
///   Nothing goes out while the presence of every device is not known yet (after a connect,
///   until the retained presence has arrived).
/// - At most ``Settings/concurrency`` POSTs are in flight. One that fails in a way a retry may
///   mend (a time-out, a connection error, 408, 429, 5xx) is retried after 1, 2, 4... s (at
///   most ``Settings/maxRetryDelay``), up to ``Settings/maxAttempts`` POSTs; the recipient's
///   presence is looked at again before each.
/// - At most ``Settings/capacity`` notifications are waiting or in flight; more are refused,
///   and so is a repeat of one of the last `capacity` messages (the same recipient, sender and
///   id).
struct PushQueue: Sendable {
    struct Settings: Sendable {
        var capacity: Int
        var concurrency: Int
        var delay: Double
        var maxAttempts: Int
        var firstRetryDelay: Double = 1
        var maxRetryDelay: Double = 60
        /// Wake-ups fall on multiples of this many seconds, so that notifications due within
        /// one such tick share a timer (0: each its own).
        var timerResolution: Double = 0.02

        init(_ push: GatewayConfiguration.PushSettings) {
            capacity = push.queue
            concurrency = push.concurrency
            delay = Double(push.delayMilliseconds) / 1000
            maxAttempts = push.maxAttempts
        }
    }

    /// One POST of a notification.
    struct Attempt: Sendable, Hashable {
        let notification: PushNotification
        /// 1 for the first POST.
        let number: Int
    }

    enum Offer: Equatable {
        case queued
        /// The same message was offered already.
        case duplicate
        /// ``Settings/capacity`` notifications wait already.
        case full
    }

    /// What to do with a notification whose time has come.
    enum Step: Equatable {
        case post(Attempt)
        /// Not sent: a device of the recipient is online.
        case suppressed(PushNotification)
    }

    /// How a POST went.
    enum Outcome: Equatable {
        case delivered
        /// Failed; `retryable` when another POST may succeed.
        case failed(reason: String, retryable: Bool)
    }

    /// What became of the notification after a POST.
    enum Finish: Equatable {
        case delivered
        /// Will be POSTed again at `at`.
        case retry(at: Double)
        /// Failed for good: the last attempt, or a failure a retry cannot mend.
        case gaveUp(reason: String)
    }

    private struct Waiting: Comparable {
        let due: Double
        /// Ties break in the order offered.
        let sequence: UInt64
        let attempt: Attempt

        static func < (a: Waiting, b: Waiting) -> Bool { (a.due, a.sequence) < (b.due, b.sequence) }
        static func == (a: Waiting, b: Waiting) -> Bool { a.sequence == b.sequence }
    }

    let settings: Settings
    private var waiting = Heap<Waiting>()
    private var sequence: UInt64 = 0
    private var recent: RecentKeys
    /// POSTs under way.
    private(set) var inFlight = 0
    /// Who is online, from every device's presence.
    private(set) var presence = OnlineUsers()
    /// Whether ``presence`` holds every device's retained presence.
    private(set) var presenceComplete = false
    /// The time of the wake-up asked for by ``nextWakeUp(now:)`` that has not come yet.
    private var armed: Double?

    init(settings: Settings) {
        self.settings = settings
        recent = RecentKeys(capacity: settings.capacity)
    }

    /// Notifications waiting or in flight.
    var count: Int { waiting.count + inFlight }

    // MARK: Events

    /// A chat for a user reached this gateway at `now`.
    mutating func offer(_ notification: PushNotification, now: Double) -> Offer {
        guard count < settings.capacity else { return .full }
        guard recent.insert(notification.key) else { return .duplicate }
        enqueue(Attempt(notification: notification, number: 1), due: now + settings.delay)
        return .queued
    }

    /// A device's presence changed (or was cleared: offline).
    mutating func presence(user: String, device: String, online: Bool) {
        presence.apply(user: user, device: device, online: online)
    }

    /// Every device's retained presence has arrived (`true`), or the connection that brings
    /// presence was lost (`false`): nothing goes out until it is complete again. What was
    /// known stays: the retained presence sent again at the next subscription replaces it.
    mutating func presenceComplete(_ complete: Bool) {
        presenceComplete = complete
    }

    /// The wake-up asked for at `time` came.
    mutating func wokeUp(at time: Double) {
        if armed == time { armed = nil }
    }

    /// The notifications due at `now` that may go out, as many as
    /// ``Settings/concurrency`` allows, each to be POSTed or dropped for an online recipient.
    mutating func takeDue(now: Double) -> [Step] {
        guard presenceComplete else { return [] }
        var steps: [Step] = []
        while inFlight < settings.concurrency, let first = waiting.min, first.due <= now {
            let attempt = waiting.removeMin().attempt
            if presence.isOnline(attempt.notification.to) {
                steps.append(.suppressed(attempt.notification))
            } else {
                inFlight += 1
                steps.append(.post(attempt))
            }
        }
        return steps
    }

    /// When the driver must call ``takeDue(now:)`` next (a timer): the next notification's
    /// time rounded up to ``Settings/timerResolution``, if earlier than the timer already
    /// asked for; `nil` when none is needed: nothing waits, the next notification is held by
    /// the concurrency limit or incomplete presence (each ends with an event), or an earlier
    /// wake-up is armed.
    mutating func nextWakeUp(now: Double) -> Double? {
        guard presenceComplete, inFlight < settings.concurrency, let due = waiting.min?.due else { return nil }
        let resolution = settings.timerResolution
        let time = resolution > 0 ? (due / resolution).rounded(.up) * resolution : due
        if let armed, armed <= time { return nil }
        armed = time
        return time
    }

    /// A POST of `attempt` ended with `outcome` at `now`.
    mutating func finished(_ attempt: Attempt, _ outcome: Outcome, now: Double) -> Finish {
        inFlight -= 1
        switch outcome {
        case .delivered:
            return .delivered
        case .failed(let reason, let retryable):
            guard retryable, attempt.number < settings.maxAttempts else { return .gaveUp(reason: reason) }
            let due = now + retryDelay(after: attempt.number)
            enqueue(Attempt(notification: attempt.notification, number: attempt.number + 1), due: due)
            return .retry(at: due)
        }
    }

    /// Seconds before the POST after attempt `number`: 1, 2, 4... up to the maximum.
    func retryDelay(after number: Int) -> Double {
        min(settings.firstRetryDelay * Double(1 << min(number - 1, 30)), settings.maxRetryDelay)
    }

    private mutating func enqueue(_ attempt: Attempt, due: Double) {
        sequence += 1
        waiting.insert(Waiting(due: due, sequence: sequence, attempt: attempt))
    }
}
