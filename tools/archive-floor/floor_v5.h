// What the archive-floor programs share: error-checked statements, and the SQLite archive's
// fifth schema (the tables a chat writes: SQLiteArchiveStore.schema, historySchema,
// leanSchema) with the store's three inserts, prepared.
#ifndef FLOOR_V5_H
#define FLOOR_V5_H
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

static void ex(sqlite3 *db, const char *sql) {
    char *error = 0;
    if (sqlite3_exec(db, sql, 0, 0, &error) != SQLITE_OK) { fprintf(stderr, "%s: %s\n", sql, error); exit(1); }
}

static void step(sqlite3 *db, sqlite3_stmt *s) {
    int rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) { fprintf(stderr, "step: %s\n", sqlite3_errmsg(db)); exit(1); }
    sqlite3_reset(s);
}

/// The insert statements of a chat: its message row, an entry per copy, a conversation line.
typedef struct { sqlite3_stmt *message, *entry, *line; } V5Inserts;

/// Creates the fifth schema's chat tables in `db` and prepares their inserts.
static V5Inserts create_v5(sqlite3 *db) {
    ex(db, "CREATE TABLE message (id INTEGER PRIMARY KEY, sender TEXT NOT NULL, message_id TEXT NOT NULL, "
           "fingerprint INTEGER NOT NULL, server_time INTEGER NOT NULL, body BLOB NOT NULL, deleted INTEGER)");
    ex(db, "CREATE UNIQUE INDEX message_key ON message(sender, message_id)");
    ex(db, "CREATE TABLE entry (stream TEXT NOT NULL, offset INTEGER NOT NULL, message INTEGER NOT NULL, origin TEXT, "
           "conversation TEXT, kind TEXT, PRIMARY KEY (stream, offset)) WITHOUT ROWID");
    ex(db, "CREATE INDEX entry_message ON entry(message)");
    ex(db, "CREATE INDEX entry_conversation ON entry(stream, conversation, offset, origin, kind)");
    ex(db, "CREATE TABLE conversation (user TEXT NOT NULL, peer TEXT NOT NULL, read_through INTEGER NOT NULL, "
           "PRIMARY KEY (user, peer)) WITHOUT ROWID");
    V5Inserts inserts;
    sqlite3_prepare_v2(db, "INSERT INTO message(id, sender, message_id, fingerprint, server_time, body) VALUES (?, ?, ?, ?, ?, ?)", -1, &inserts.message, 0);
    sqlite3_prepare_v2(db, "INSERT INTO entry(stream, offset, message, origin, conversation) VALUES (?, ?, ?, ?, ?)", -1, &inserts.entry, 0);
    sqlite3_prepare_v2(db, "INSERT INTO conversation(user, peer, read_through) VALUES (?, ?, 0) ON CONFLICT(user, peer) DO NOTHING", -1, &inserts.line, 0);
    return inserts;
}
#endif
