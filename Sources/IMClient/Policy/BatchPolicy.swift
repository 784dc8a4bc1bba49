/// How an incoming stream is cut into batches (seed 002's "AsyncArray"): so that a flood of
/// messages, e.g. the offline backlog at login, reaches the UI in a few batches instead of
/// one update per message.
///
/// A batch is delivered when the stream has been quiet for ``interval`` after its last
/// element (further elements within the interval postpone delivery: a debounce), but no
/// later than ``timeout`` after its first element (so a steady trickle still gets through),
/// and at once when it holds ``maxCount`` elements.
///
/// ```swift
/// for await messages in client.messages.batched(BatchPolicy(interval: .milliseconds(200))) {
///     conversation.append(contentsOf: messages)  // one UI update per batch
/// }
/// ```
public struct BatchPolicy: Sendable, Hashable {
    /// Quiet time after the last element before the batch is delivered. Default 350 ms.
    public var interval: Duration
    /// Longest time from a batch's first element to its delivery. Default 5 s.
    public var timeout: Duration
    /// Elements that make a batch full: it is delivered at once. Default 30.
    public var maxCount: Int

    /// Creates a policy. Durations must not be negative; `maxCount` must be at least 1.
    public init(interval: Duration = .milliseconds(350), timeout: Duration = .seconds(5), maxCount: Int = 30) {
        precondition(interval >= .zero, "the batch interval must not be negative")
        precondition(timeout >= .zero, "the batch timeout must not be negative")
        precondition(maxCount >= 1, "a batch holds at least one element")
        self.interval = interval
        self.timeout = timeout
        self.maxCount = maxCount
    }
}

/// The batch being gathered under a ``BatchPolicy``. Pure: time is passed in.
struct BatchAccumulator<Element> {
    /// The rules.
    let policy: BatchPolicy
    /// The elements gathered, oldest first.
    private(set) var elements: [Element] = []
    private var firstAt: ContinuousClock.Instant?
    private var lastAt: ContinuousClock.Instant?

    init(policy: BatchPolicy) {
        self.policy = policy
    }

    /// Whether no element is gathered.
    var isEmpty: Bool { elements.isEmpty }
    /// How many elements are gathered.
    var count: Int { elements.count }

    /// Adds `element`, arrived at `now`. Returns the batch (and starts a new one) when it
    /// reached ``BatchPolicy/maxCount``; `nil` otherwise.
    mutating func add(_ element: Element, now: ContinuousClock.Instant) -> [Element]? {
        if elements.isEmpty { firstAt = now }
        lastAt = now
        elements.append(element)
        return elements.count >= policy.maxCount ? flush() : nil
    }

    /// When the gathered batch is due: `interval` after the last element, but no later than
    /// `timeout` after the first. `nil` when empty.
    var deadline: ContinuousClock.Instant? {
        guard let firstAt, let lastAt else { return nil }
        return min(lastAt + policy.interval, firstAt + policy.timeout)
    }

    /// Whether the gathered batch is due at `now` (never when empty).
    func isDue(now: ContinuousClock.Instant) -> Bool {
        deadline.map { now >= $0 } ?? false
    }

    /// Returns the gathered elements (maybe none) and starts a new batch.
    mutating func flush() -> [Element] {
        defer {
            elements = []
            firstAt = nil
            lastAt = nil
        }
        return elements
    }
}

extension BatchAccumulator: Sendable where Element: Sendable {}
