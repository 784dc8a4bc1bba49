/// How long retention (and the cap per conversation) pauses between two of its transactions.
///
/// Deleting old messages costs about as much as storing new ones (the same pages of the same
/// indexes, at random places once the archive is large), and on SQLite each deleting
/// transaction holds the one writer that chats wait for. So while chats are being committed
/// (the archive's commit count moved since the last transaction), a transaction that took `t`
/// is followed by a pause of `t × (1 − share) / share`: the deleting takes at most `share` of
/// the time, and the chat path keeps the rest. When nothing else was committed, the pause is
/// ``idlePause``: old messages then go as fast as the store deletes them (at night, say).
struct RetentionPacer: Sendable {
    /// The pause when no chat was committed meanwhile.
    static let idlePause: Duration = .milliseconds(5)
    /// The share of the time deleting may take while chats are committed (0 < share <= 1).
    let share: Double
    private var lastCommits: Int?

    init(share: Double) {
        self.share = min(1, max(0.001, share))
    }

    /// The pause after a transaction that took `took` nanoseconds, given the archive's commit
    /// count now.
    mutating func pause(after took: UInt64, commits: Int) -> Duration {
        defer { lastCommits = commits }
        guard let lastCommits, lastCommits != commits else { return Self.idlePause }
        let nanoseconds = Double(took) * (1 - share) / share
        return max(Self.idlePause, .nanoseconds(Int64(min(nanoseconds, 60e9))))
    }
}
