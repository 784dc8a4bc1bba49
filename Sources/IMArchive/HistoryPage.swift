/// Where a page of a conversation's history starts, in offsets of the reader's own stream.
public enum HistoryPosition: Sendable, Hashable {
    /// The newest messages.
    case latest
    /// The newest messages older than this offset (paging back).
    case before(UInt64)
    /// The oldest messages newer than this offset (paging forward).
    case after(UInt64)
}

/// A page of a conversation's history: its messages oldest first, and whether it is the last
/// page in its direction (nothing older for ``HistoryPosition/latest`` and
/// ``HistoryPosition/before(_:)``, nothing newer for ``HistoryPosition/after(_:)``).
public struct HistoryPage: Sendable, Hashable {
    /// The entries, oldest first.
    public var entries: [StoredEntry]
    /// No more in the page's direction.
    public var complete: Bool

    /// A page.
    public init(entries: [StoredEntry], complete: Bool) {
        self.entries = entries
        self.complete = complete
    }
}
