// The engine's floor for `imbench history`'s fill: exactly the messages imbench history writes
// (HistoryPlan in Sources/imbench/Archive/HistoryCommand.swift, ported: the same SplitMix64-style
// draws, names, ids, bodies and times), into the SQLite archive's fifth schema (SQLiteArchiveStore:
// the message row and its unique key, per copy the entry with entry_message and
// entry_conversation, a conversation line per conversation that starts), with imgw's settings
// (WAL, synchronous=NORMAL) and the fill's batches: each transaction's message rows in id order,
// its entries sorted by (stream, offset), its new conversation lines sorted, as the store writes
// them. No Swift, no GRDB, no group commit: prepared single-row statements, one thread.
//
// gcc -O2 -o history_floor history_floor.c -lsqlite3   (floor_v5.h beside it)
// ./history_floor DB MESSAGES USERS HEAVY BATCH CACHE_MB [DAYS]
//
// Prints the rate and CPU per message of each million (or tenth, for fewer messages), then the
// totals and bytes per message (the file and its WAL after the last commit).
#include "floor_v5.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t splitmix(uint64_t *state) {
    *state += 0x9E3779B97F4A7C15ULL;
    uint64_t z = *state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133411EBULL;
    return z ^ (z >> 31);
}

static long USERS, HEAVY, MESSAGES, DAYS = 60;
static uint64_t NOW;

// HistoryPlan.contact(of:_:)
static long contact(long user, long k) {
    long normals = USERS - HEAVY;
    if (k == 0) {
        long partner = HEAVY + ((user - HEAVY) ^ 1);
        return partner < USERS ? partner : HEAVY;
    }
    uint64_t mixer = (uint64_t)user * 1000003ULL + (uint64_t)k;
    long offset = 1 + (long)(splitmix(&mixer) % (uint64_t)(normals - 1));
    return HEAVY + (user - HEAVY + offset) % normals;
}

// HistoryPlan.participants(_:_:), drawing from `mixer`.
static void participants(long index, uint64_t *mixer, long *sender, long *recipient) {
    if (index % 10 == 0) {
        long heavy_user = (long)(splitmix(mixer) % (uint64_t)HEAVY);
        uint64_t contact_mixer = ((uint64_t)heavy_user << 32) | (splitmix(mixer) % 1000);
        long c = HEAVY + (long)(splitmix(&contact_mixer) % (uint64_t)(USERS - HEAVY));
        if (splitmix(mixer) % 2 == 0) { *sender = heavy_user; *recipient = c; } else { *sender = c; *recipient = heavy_user; }
    } else {
        long user = HEAVY + (long)(splitmix(mixer) % (uint64_t)(USERS - HEAVY));
        long k = splitmix(mixer) % 10 < 7 ? 0 : 1 + (long)(splitmix(mixer) % 9);
        long peer = contact(user, k);
        if (splitmix(mixer) % 2 == 0) { *sender = user; *recipient = peer; } else { *sender = peer; *recipient = user; }
    }
}

static double cpu_seconds(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static double wall_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

typedef struct { char stream[24]; long offset; long message; int own; char conversation[28]; } Entry;
typedef struct { char user[24]; char peer[28]; } Line;

static int entry_order(const void *a, const void *b) {
    const Entry *x = a, *y = b;
    int c = strcmp(x->stream, y->stream);
    return c ? c : (x->offset > y->offset) - (x->offset < y->offset);
}

static int line_order(const void *a, const void *b) {
    const Line *x = a, *y = b;
    int c = strcmp(x->user, y->user);
    return c ? c : strcmp(x->peer, y->peer);
}

static long long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : 0;
}

int main(int argc, char **argv) {
    if (argc < 7) { fprintf(stderr, "usage: %s DB MESSAGES USERS HEAVY BATCH CACHE_MB [DAYS]\n", argv[0]); return 2; }
    const char *path = argv[1];
    MESSAGES = atol(argv[2]); USERS = atol(argv[3]); HEAVY = atol(argv[4]);
    long batch = atol(argv[5]); long cache_mb = atol(argv[6]);
    if (argc > 7) DAYS = atol(argv[7]);
    NOW = (uint64_t)time(0) * 1000;
    char wal[1024]; snprintf(wal, sizeof wal, "%s-wal", path);
    unlink(path); unlink(wal);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) { fprintf(stderr, "open %s\n", path); return 1; }
    ex(db, "PRAGMA journal_mode=WAL");
    ex(db, "PRAGMA synchronous=NORMAL");
    char pragma[64]; snprintf(pragma, sizeof pragma, "PRAGMA cache_size=-%ld", cache_mb * 1024); ex(db, pragma);
    V5Inserts inserts = create_v5(db);
    sqlite3_stmt *insert_message = inserts.message, *insert_entry = inserts.entry, *insert_line = inserts.line;

    long *heads = calloc(USERS, sizeof(long));
    Entry *entries = malloc(sizeof(Entry) * batch * 2);
    Line *lines = malloc(sizeof(Line) * batch * 2);
    long window = MESSAGES >= 10000000 ? 1000000 : (MESSAGES / 10 > 0 ? MESSAGES / 10 : MESSAGES);
    double c0 = cpu_seconds(), w0 = wall_seconds(), cw = c0, ww = w0;
    long since = 0, mark = window;
    char text[128], body[512], id[32], from[24], to[24];
    for (long start = 0; start < MESSAGES; start += batch) {
        long end = start + batch < MESSAGES ? start + batch : MESSAGES;
        long n_entries = 0, n_lines = 0;
        ex(db, "BEGIN");
        for (long index = start; index < end; index++) {
            uint64_t mixer = (uint64_t)index;
            long sender, recipient;
            participants(index, &mixer, &sender, &recipient);
            uint64_t span = (uint64_t)DAYS * 86400000ULL;
            uint64_t when = NOW - span + span * (uint64_t)index / (uint64_t)MESSAGES;
            int words = 20 + (int)(splitmix(&mixer) % 80);
            memset(text, 'w', words); text[words] = 0;
            snprintf(from, sizeof from, "h%ld", sender);
            snprintf(to, sizeof to, "h%ld", recipient);
            snprintf(id, sizeof id, "m%ld", index);
            int body_length = snprintf(body, sizeof body, "{\"from\":\"%s\",\"id\":\"%s\",\"text\":\"%s\",\"time\":%llu,\"to\":\"%s\",\"type\":\"text\"}",
                                       from, id, text, (unsigned long long)when, to);
            long message = index + 1;
            sqlite3_bind_int64(insert_message, 1, message);
            sqlite3_bind_text(insert_message, 2, from, -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(insert_message, 3, id, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(insert_message, 4, index);
            sqlite3_bind_int64(insert_message, 5, (sqlite3_int64)when);
            sqlite3_bind_blob(insert_message, 6, body, body_length, SQLITE_TRANSIENT);
            step(db, insert_message);
            // The copies: the recipient's, then the sender's own (origin "phone").
            long streams[2] = {recipient, sender};
            const char *peers[2] = {from, to};
            for (int j = 0; j < 2; j++) {
                Entry *e = &entries[n_entries++];
                snprintf(e->stream, sizeof e->stream, "h%ld", streams[j]);
                e->offset = ++heads[streams[j]];
                e->message = message;
                e->own = j == 1;
                snprintf(e->conversation, sizeof e->conversation, "u:%s", peers[j]);
                Line *l = &lines[n_lines++];
                memcpy(l->user, e->stream, sizeof l->user);
                memcpy(l->peer, e->conversation, sizeof l->peer);
            }
        }
        qsort(entries, n_entries, sizeof(Entry), entry_order);
        for (long k = 0; k < n_entries; k++) {
            Entry *e = &entries[k];
            sqlite3_bind_text(insert_entry, 1, e->stream, -1, SQLITE_STATIC);
            sqlite3_bind_int64(insert_entry, 2, e->offset);
            sqlite3_bind_int64(insert_entry, 3, e->message);
            if (e->own) sqlite3_bind_text(insert_entry, 4, "phone", -1, SQLITE_STATIC); else sqlite3_bind_null(insert_entry, 4);
            sqlite3_bind_text(insert_entry, 5, e->conversation, -1, SQLITE_STATIC);
            step(db, insert_entry);
        }
        // The store writes each line of the batch once (a set), sorted.
        qsort(lines, n_lines, sizeof(Line), line_order);
        for (long k = 0; k < n_lines; k++) {
            if (k > 0 && line_order(&lines[k], &lines[k - 1]) == 0) continue;
            sqlite3_bind_text(insert_line, 1, lines[k].user, -1, SQLITE_STATIC);
            sqlite3_bind_text(insert_line, 2, lines[k].peer, -1, SQLITE_STATIC);
            step(db, insert_line);
        }
        ex(db, "COMMIT");
        if (end >= mark || end == MESSAGES) {
            double c = cpu_seconds(), w = wall_seconds();
            printf("through %ld: %.0f msg/s, %.1f us CPU/msg (since %ld)\n", end, (end - since) / (w - ww), (c - cw) / (end - since) * 1e6, since);
            fflush(stdout);
            cw = c; ww = w; since = end; mark += window;
        }
    }
    double cpu = cpu_seconds() - c0, wall = wall_seconds() - w0;
    long long bytes = file_size(path) + file_size(wal);
    printf("{\"floor\":\"history\",\"messages\":%ld,\"users\":%ld,\"heavy\":%ld,\"batch\":%ld,\"cache_mb\":%ld,"
           "\"msgs_per_s\":%.0f,\"cpu_us_per_msg\":%.1f,\"bytes_per_message\":%.0f}\n",
           MESSAGES, USERS, HEAVY, batch, cache_mb, MESSAGES / wall, cpu / MESSAGES * 1e6, (double)bytes / MESSAGES);
    sqlite3_close(db);
    return 0;
}
