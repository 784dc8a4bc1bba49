/// Where a ``MessageArchive`` keeps its messages: ``SQLiteArchiveStore`` for one gateway,
/// ``PostgresArchiveStore`` for several. A store does what it is asked when it is asked; the
/// archive decides when (group commit) and what happens when a store fails.
///
/// Offsets: each stream (a user) numbers its entries 1, 2, 3, ... in commit order, with no
/// gap and no repeat, and a reader never sees offset n+1 of a stream before offset n is
/// committed. Retention deletes old entries; it never makes an offset be given out again.
public protocol ArchiveStore: Sendable {
    /// The store's epoch (``ArchiveEpoch``), fixed when it was created.
    var epoch: ArchiveEpoch { get }
    /// What the store is, for logs: `sqlite /var/lib/imgw/archive.sqlite`.
    var description: String { get }

    /// In one transaction: appends each message to the streams of its copies, in order, and
    /// saves the positions (a position never moves back). One outcome per message, in order.
    /// Throws if the transaction did not commit: then nothing of it is stored.
    func commit(_ messages: [ArchiveMessage], positions: [DevicePosition]) async throws -> [AppendOutcome]

    /// The entries of `stream` after offset `after` and at most `through`, oldest first, at
    /// most `limit`.
    func read(stream: String, after: UInt64, through: UInt64, limit: Int) async throws -> [StoredEntry]

    /// What `stream` holds.
    func bounds(of stream: String) async throws -> StreamBounds

    /// The saved position of a device, if one was ever saved.
    func position(user: String, device: String) async throws -> UInt64?

    /// Deletes at most `limit` of the oldest messages accepted before `serverTime` (Unix
    /// milliseconds), with their entries, in one short transaction; returns how many.
    func deleteMessages(acceptedBefore serverTime: UInt64, limit: Int) async throws -> Int

    /// Deletes the oldest entries of `conversation` in `stream` beyond its newest `keep`
    /// (``MessageArchive/Settings/maxPerConversation``), at most `limit` of them, in one short
    /// transaction: the messages no stream holds any more go too, the conversation's unread
    /// count follows, and the stream's ``StreamBounds/trimmedThrough`` moves up to the
    /// newest offset deleted. Returns how many entries it deleted.
    func trimConversation(stream: String, conversation: Conversation, keep: Int, limit: Int) async throws -> Int

    /// How many messages and bytes the store holds now.
    func size() async throws -> ArchiveSize

    /// The members of `group` (user → since, Unix milliseconds), or `nil` when the store has
    /// no record of the group at all (never written here: a group made through a gateway
    /// without an archive, or before archives kept groups). A group whose members were all
    /// removed is known, and empty.
    func groupMembers(_ group: String) async throws -> [String: UInt64]?

    /// Records changes of `group`'s membership in one transaction: a user added (since) or
    /// removed (`nil`, kept as a removal so that the group stays known).
    func recordGroupMembers(_ group: String, _ changes: [String: UInt64?]) async throws

    /// A page of `stream`'s entries in `conversation` from `position`, at most `limit`,
    /// oldest first.
    func history(stream: String, conversation: Conversation, position: HistoryPosition, limit: Int) async throws -> HistoryPage

    /// A page of `user`'s conversations, the most recent first: those whose newest message
    /// is older than offset `before` (`nil`: from the newest), at most `limit`.
    func conversations(user: String, before: UInt64?, limit: Int) async throws -> ConversationPage

    /// Marks `conversation` read by `user` up to offset `through` of the user's stream (a
    /// marker never moves back) and counts what is left unread.
    func markRead(user: String, conversation: Conversation, through: UInt64) async throws -> ReadMarkOutcome

    /// Deletes `sender`'s message `messageID` for everyone, in one transaction: its body
    /// becomes `tombstone` (so every copy reads as deleted, in history and catching up), and
    /// each stream holding a copy gets a tombstone entry at its end (the sender's own from
    /// `origin`, the device that deleted it), for the devices to be told. Deleting again
    /// changes nothing and returns the first deletion's tombstones; `nil`: no such message.
    func deleteMessage(sender: String, messageID: String, at time: UInt64, origin: String?, tombstone: @escaping @Sendable (_ body: [UInt8]) -> [UInt8]) async throws -> DeletedMessage?

    /// Erases what the store holds of `user`, in one transaction: the body of every message
    /// the user sent becomes `tombstone` of it (deleted at `time`), and the user's stream
    /// entries, conversation list and device positions are removed (the stream's counter
    /// stays: its offsets are never given out again).
    func eraseUser(_ user: String, at time: UInt64, tombstone: @escaping @Sendable (_ body: [UInt8]) -> [UInt8]) async throws -> UserErasure

    /// Closes the store; nothing may be asked of it afterwards.
    func close() async

    /// ``commit(_:positions:)`` as a call that blocks its thread, for a store whose commit is
    /// work on this machine (SQLite): the archive then commits on a dispatch queue of its own,
    /// without the task switches of awaiting it. `nil` (the default): the archive awaits
    /// ``commit(_:positions:)``.
    var blockingCommit: (@Sendable (_ messages: [ArchiveMessage], _ positions: [DevicePosition]) throws -> [AppendOutcome])? { get }

    /// Work a store with ``blockingCommit`` does on the writer's thread between commits
    /// (SQLite: the end of a checkpoint, so that the next commit starts the WAL over). It must
    /// be short, and cheap when there is nothing to do: it runs after every commit.
    var blockingBetweenCommits: (@Sendable () -> Void)? { get }
    /// Whether this process is the store's only writer (SQLite, one gateway): then what a
    /// login reads can be kept in memory from the archive's own writes (``KnownBounds``).
    /// `false` (the default) when other gateways may write the same streams.
    var isSoleWriter: Bool { get }
}

extension ArchiveStore {
    public var blockingCommit: (@Sendable (_ messages: [ArchiveMessage], _ positions: [DevicePosition]) throws -> [AppendOutcome])? { nil }
    public var blockingBetweenCommits: (@Sendable () -> Void)? { nil }
    public var isSoleWriter: Bool { false }
}

/// What a store holds.
public struct ArchiveSize: Sendable, Hashable {
    /// Messages stored.
    public var messages: Int
    /// Entries stored (a message has one per stream it is in).
    public var entries: Int
    /// Bytes on disk (SQLite: the file and its WAL; PostgreSQL: the tables and their indexes).
    public var bytes: Int

    /// A size.
    public init(messages: Int, entries: Int, bytes: Int) {
        self.messages = messages
        self.entries = entries
        self.bytes = bytes
    }
}
