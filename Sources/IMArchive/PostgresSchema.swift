/// The PostgreSQL archive's tables, version by version (docs/OPERATIONS.md, "PostgreSQL"):
/// the counterpart of the SQLite store's GRDB migrations. `imgw_meta.schema` records the
/// version the tables are at; a gateway brings older tables up, step by step in one
/// transaction, and refuses newer ones (or `imgw_*` tables without a version) before it
/// changes anything.
enum PostgresSchema {
    /// One version: the statements that bring tables of the version before to it.
    struct Step: Sendable {
        let version: Int
        let statements: [String]
    }

    /// The table the version is recorded in, created first (it holds the epoch too).
    static let meta = "CREATE TABLE IF NOT EXISTS imgw_meta (key text PRIMARY KEY, value text NOT NULL)"

    /// Every version, oldest first. A statement of an older step may meet what a later one
    /// made only on tables that old gateways changed in place, hence `IF NOT EXISTS`.
    static let ladder: [Step] = [
        Step(version: 1, statements: [
            """
            CREATE TABLE IF NOT EXISTS imgw_message (
              id bigserial PRIMARY KEY, sender text NOT NULL, message_id text NOT NULL,
              fingerprint bigint NOT NULL, server_time bigint NOT NULL, body bytea NOT NULL,
              UNIQUE (sender, message_id))
            """,
            """
            CREATE TABLE IF NOT EXISTS imgw_entry (
              stream text NOT NULL, off bigint NOT NULL, message bigint NOT NULL, origin text,
              PRIMARY KEY (stream, off))
            """,
            "CREATE INDEX IF NOT EXISTS imgw_entry_message ON imgw_entry (message)",
            "CREATE TABLE IF NOT EXISTS imgw_stream (name text PRIMARY KEY, last bigint NOT NULL)",
            """
            CREATE TABLE IF NOT EXISTS imgw_position (
              user_id text NOT NULL, device text NOT NULL, off bigint NOT NULL, updated bigint NOT NULL,
              PRIMARY KEY (user_id, device))
            """,
        ]),
        // Group memberships (since null: removed).
        Step(version: 2, statements: [
            """
            CREATE TABLE IF NOT EXISTS imgw_group_member (
              grp text NOT NULL, user_id text NOT NULL, since bigint,
              PRIMARY KEY (grp, user_id))
            """
        ]),
        // Each entry's conversation, deletes for everyone, each user's conversation list; the
        // entries stored before get their conversation from the bodies (imgw writes them as
        // JSON with `from`, `to` and `group`), the lists are built from them.
        Step(version: 3, statements: [
            "ALTER TABLE imgw_entry ADD COLUMN IF NOT EXISTS conversation text",
            "ALTER TABLE imgw_entry ADD COLUMN IF NOT EXISTS kind text",
            "ALTER TABLE imgw_message ADD COLUMN IF NOT EXISTS deleted bigint",
            "CREATE INDEX IF NOT EXISTS imgw_entry_conversation ON imgw_entry (stream, conversation, off)",
            """
            CREATE TABLE IF NOT EXISTS imgw_conversation (
              user_id text NOT NULL, peer text NOT NULL, last_off bigint NOT NULL, last_time bigint NOT NULL,
              read_through bigint NOT NULL, unread integer NOT NULL,
              PRIMARY KEY (user_id, peer))
            """,
            "CREATE INDEX IF NOT EXISTS imgw_conversation_recent ON imgw_conversation (user_id, last_off)",
            """
            UPDATE imgw_entry e SET conversation = CASE
                WHEN b.doc ->> 'group' IS NOT NULL THEN 'g:' || (b.doc ->> 'group')
                WHEN e.stream = b.sender THEN 'u:' || (b.doc ->> 'to')
                ELSE 'u:' || b.sender END
            FROM (SELECT id, sender, convert_from(body, 'UTF8')::jsonb AS doc FROM imgw_message) b
            WHERE b.id = e.message AND e.conversation IS NULL
            """,
            """
            INSERT INTO imgw_conversation (user_id, peer, last_off, last_time, read_through, unread)
            SELECT stream, conversation, max(off), 0, coalesce(max(CASE WHEN origin IS NOT NULL THEN off END), 0), 0
            FROM imgw_entry WHERE conversation IS NOT NULL GROUP BY stream, conversation
            ON CONFLICT DO NOTHING
            """,
            """
            UPDATE imgw_conversation c SET
              last_time = coalesce((SELECT m.server_time FROM imgw_entry e JOIN imgw_message m ON m.id = e.message
                                    WHERE e.stream = c.user_id AND e.off = c.last_off), 0),
              unread = (SELECT count(*) FROM imgw_entry e WHERE e.stream = c.user_id AND e.conversation = c.peer
                        AND e.off > c.read_through AND e.origin IS NULL)
            """,
        ]),
        // How far a cap per conversation has deleted in each stream (what a device whose
        // position is older may have lost). Gateways of version 3 created it unversioned.
        Step(version: 4, statements: [
            "CREATE TABLE IF NOT EXISTS imgw_trimmed (stream text PRIMARY KEY, through bigint NOT NULL)"
        ]),
    ]

    /// The version this imgw writes.
    static var current: Int { ladder[ladder.count - 1].version }

    /// The steps that bring tables whose `imgw_meta.schema` reads `recorded` (nil: no row) to
    /// ``current``: all of them for a new database, none for current tables. Throws
    /// ``ArchiveError/Code/corrupt`` for a version that is not one or is newer than this imgw
    /// knows, and for `imgw_*` tables (`hasTables`) without a version.
    static func steps(recorded: String?, hasTables: Bool) throws(ArchiveError) -> [Step] {
        guard let recorded else {
            if hasTables {
                throw ArchiveError(.corrupt, "the database holds imgw_* tables but imgw_meta records no schema version: they are not an imgw archive")
            }
            return ladder
        }
        guard let version = Int(recorded), version >= 1 else {
            throw ArchiveError(.corrupt, "imgw_meta records schema \(recorded.debugDescription), which is not a version: the tables are not an imgw archive")
        }
        guard version <= current else {
            throw ArchiveError(
                .corrupt,
                "the archive's tables are of schema \(version), written by a newer imgw (this one reads schemas 1 to \(current)): run that version, or use another database")
        }
        return ladder.filter { $0.version > version }
    }
}
