import DequeModule
/// The kind of a frame waiting to go to a device, in priority order: earlier cases go first.
public enum DownlinkClass: Int, Hashable, Sendable, CaseIterable, Comparable {
    /// DELIVERY: never dropped.
    case chat
    /// RECEIPT_NOTICE: never dropped.
    case receipt
    /// PRESENCE: lossy (only the latest state of a device matters).
    case presence
    /// LOCATION: lossy (only the latest position matters).
    case location
    /// Anything else, e.g. PUBLISH from pub/sub at QoS 1 or 2: never dropped.
    case other
    /// PUBLISH from pub/sub at QoS 0 (at most once): lossy, the oldest dropped beyond the
    /// limit, so a device that stops reading cannot make the gateway buffer a busy topic
    /// without bound. (QoS 1/2 is bounded by the broker's receive maximum instead.)
    case atMostOnce

    /// Whether entries of this class may be coalesced and dropped.
    public var isLossy: Bool { self == .presence || self == .location || self == .atMostOnce }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Frames waiting for a slow device, by priority: all chat before any receipt, receipts before
/// presence, presence before location, location before other, other before QoS 0 pub/sub;
/// first in, first out within a class.
///
/// Presence, location and QoS 0 pub/sub are lossy: an entry with the coalescing key of one already queued
/// replaces it in place (the latest wins, keeping the older one's turn), and each of them
/// holds at most `lossyLimit` entries, dropping its oldest beyond. Chat, receipts and other
/// frames are never dropped or coalesced (their keys are ignored); bound them upstream, e.g.
/// by `limits.max_unacked_deliveries`.
public struct DownlinkQueue<Element> {
    /// The most entries each lossy class holds.
    public let lossyLimit: Int
    /// Lossy entries dropped because their class was full.
    public private(set) var droppedCount = 0
    /// Lossy entries replaced by a newer one with the same key.
    public private(set) var coalescedCount = 0

    /// One lane per class while anything is queued; none when the queue is empty, so that
    /// an idle connection holds no storage of its busiest moment.
    private var lanes: [Lane] = []

    /// Creates an empty queue.
    public init(lossyLimit: Int = 256) {
        precondition(lossyLimit > 0, "lossy classes must hold at least one entry")
        self.lossyLimit = lossyLimit
    }

    /// Queues `element`. For presence and location, a `coalescingKey` (e.g. `user/device` or
    /// the sharing user) makes it replace a queued entry with the same key.
    public mutating func enqueue(_ element: Element, class kind: DownlinkClass, coalescingKey: String? = nil) {
        let index = kind.rawValue
        if self.lanes.isEmpty { self.lanes = DownlinkClass.allCases.map { _ in Lane() } }
        if kind.isLossy, let key = coalescingKey, self.lanes[index].replace(key: key, with: element) {
            self.coalescedCount += 1
            return
        }
        self.lanes[index].append(element, key: kind.isLossy ? coalescingKey : nil)
        while kind.isLossy, self.lanes[index].count > self.lossyLimit {
            _ = self.lanes[index].popFirst()
            self.droppedCount += 1
        }
    }

    /// The next entry by priority, or `nil` when empty.
    public mutating func dequeue() -> Element? {
        for index in self.lanes.indices where self.lanes[index].count > 0 {
            let element = self.lanes[index].popFirst()
            if self.isEmpty { self.lanes = [] }
            return element
        }
        return nil
    }

    /// Entries queued.
    public var count: Int { self.lanes.reduce(0) { $0 + $1.count } }

    /// Whether nothing is queued.
    public var isEmpty: Bool { self.count == 0 }

    /// Entries queued in one class.
    public func count(of kind: DownlinkClass) -> Int { self.lanes.isEmpty ? 0 : self.lanes[kind.rawValue].count }

    /// One class's entries in order; `keys` maps coalescing keys to absolute positions.
    struct Lane {
        var slots = Deque<(element: Element, key: String?)>()
        /// Absolute position (count of entries ever popped before it) of each keyed entry.
        var keys: [String: Int] = [:]
        var popped = 0

        var count: Int { self.slots.count }

        mutating func append(_ element: Element, key: String?) {
            if let key { self.keys[key] = self.popped + self.slots.count }
            self.slots.append((element, key))
        }

        mutating func replace(key: String, with element: Element) -> Bool {
            guard let position = self.keys[key] else { return false }
            self.slots[position - self.popped].element = element
            return true
        }

        mutating func popFirst() -> Element? {
            guard let first = self.slots.popFirst() else { return nil }
            if let key = first.key, self.keys[key] == self.popped { self.keys[key] = nil }
            self.popped += 1
            return first.element
        }
    }
}

extension DownlinkQueue: Sendable where Element: Sendable {}

extension DownlinkQueue.Lane: Sendable where Element: Sendable {}
