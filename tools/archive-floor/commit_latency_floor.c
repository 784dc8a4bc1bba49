// The engine's floor for the archive's latency in the chat path at a steady rate: messages arrive
// on a schedule (RATE a second, open loop, as `ratio.sh -r RATE` sends them), a group commit
// takes every message that has arrived once the oldest has waited DELAY_US (imgw's
// archive.commit_delay_us) or the previous commit ends, and writes them into the fifth schema
// (the message and its key, two entries with entry_message and entry_conversation, the
// conversation lines, INSERT OR IGNORE) with imgw's settings (WAL, synchronous=NORMAL). Each
// message's latency is from its arrival to its commit's return. Checkpoints: SQLite's own (in
// the commit that crosses 1,000 pages; MODE auto) or a second thread's PASSIVE checkpoint every
// 50 ms with the automatic one off (MODE background, as imgw's WALCheckpointer; with
// RESTART_FRAMES, the writer's share too: once a background checkpoint found the WAL that long,
// the writer copies what is left after its next commit, and the WAL starts over).
//
// gcc -O2 -o commit_latency_floor commit_latency_floor.c -lsqlite3 -lpthread   (floor_v5.h beside it)
// ./commit_latency_floor DB RATE SECONDS USERS DELAY_US auto|background [RESTART_FRAMES]
//
// Prints the commits, messages a commit, the latency's p50, p99 and max, and the CPU per message.
#include <pthread.h>
#include "floor_v5.h"
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

static void sleep_until(uint64_t deadline) {
    struct timespec t = {(time_t)(deadline / 1000000000ULL), (long)(deadline % 1000000000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, 0) != 0) {}
}

static int compare(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static const char *path;
static atomic_int stopping;
/// MODE background: WAL pages past which the writer copies, between commits, what the
/// background checkpoint left (imgw's WALCheckpointer.restartFrames), so that the WAL starts over.
static long restart_frames;
static atomic_int finish_wanted;

static void *checkpointer(void *unused) {
    (void)unused;
    sqlite3 *db;
    sqlite3_open(path, &db);
    sqlite3_busy_timeout(db, 5000);
    // A connection that has not read the file does not know it is in WAL mode: its checkpoints
    // would do nothing (frames -1).
    ex(db, "SELECT count(*) FROM sqlite_master");
    while (!atomic_load(&stopping)) {
        usleep(50000);
        int frames = 0, copied = 0;
        if (sqlite3_wal_checkpoint_v2(db, "main", SQLITE_CHECKPOINT_PASSIVE, &frames, &copied) == SQLITE_OK && frames < 0) {
            fprintf(stderr, "the checkpointer's connection is not in WAL mode\n");
            exit(1);
        }
        if (restart_frames > 0 && frames >= restart_frames) atomic_store(&finish_wanted, 1);
    }
    sqlite3_close(db);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 7) { fprintf(stderr, "usage: %s DB RATE SECONDS USERS DELAY_US auto|background\n", argv[0]); return 2; }
    path = argv[1];
    long rate = atol(argv[2]), seconds = atol(argv[3]), users = atol(argv[4]), delay_us = atol(argv[5]);
    int background = strcmp(argv[6], "background") == 0;
    if (argc > 7) restart_frames = atol(argv[7]);
    char wal[1024]; snprintf(wal, sizeof wal, "%s-wal", path);
    unlink(path); unlink(wal);
    sqlite3 *db;
    sqlite3_open(path, &db);
    ex(db, "PRAGMA journal_mode=WAL");
    ex(db, "PRAGMA synchronous=NORMAL");
    ex(db, "PRAGMA cache_size=-65536");
    if (background) ex(db, "PRAGMA wal_autocheckpoint=0");
    V5Inserts inserts = create_v5(db);
    sqlite3_stmt *insert_message = inserts.message, *insert_entry = inserts.entry, *insert_line = inserts.line;
    pthread_t thread;
    if (background) pthread_create(&thread, 0, checkpointer, 0);

    long total = rate * seconds;
    uint64_t interval = 1000000000ULL / (uint64_t)rate, delay = (uint64_t)delay_us * 1000ULL;
    uint64_t *latency = malloc(sizeof(uint64_t) * total);
    long *heads = calloc(users, sizeof(long));
    char body[160]; memset(body, 'w', sizeof body);
    struct rusage r0; getrusage(RUSAGE_SELF, &r0);
    uint64_t start = now_ns() + 10000000ULL;
    long next = 0, commits = 0;
    // Message i arrives at start + i * interval: user 2k sends to 2k+1 and back, pairs in turn.
    while (next < total) {
        uint64_t first = start + (uint64_t)next * interval;
        uint64_t now = now_ns();
        if (now < first + delay) { sleep_until(first + delay); now = now_ns(); }
        long last = (long)((now - start) / interval);
        if (last >= total) last = total - 1;
        ex(db, "BEGIN");
        for (long i = next; i <= last; i++) {
            long pair = i % (users / 2), sender = 2 * pair + (i / (users / 2)) % 2, recipient = sender ^ 1;
            char from[24], to[24], id[24], peer[2][28];
            snprintf(from, sizeof from, "u%ld", sender); snprintf(to, sizeof to, "u%ld", recipient);
            snprintf(id, sizeof id, "m%ld", i);
            snprintf(peer[0], sizeof peer[0], "u:%s", from); snprintf(peer[1], sizeof peer[1], "u:%s", to);
            sqlite3_bind_int64(insert_message, 1, i + 1);
            sqlite3_bind_text(insert_message, 2, from, -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(insert_message, 3, id, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(insert_message, 4, i);
            sqlite3_bind_int64(insert_message, 5, i);
            sqlite3_bind_blob(insert_message, 6, body, 150, SQLITE_STATIC);
            step(db, insert_message);
            long streams[2] = {recipient, sender};
            for (int j = 0; j < 2; j++) {
                char stream[24]; snprintf(stream, sizeof stream, "u%ld", streams[j]);
                sqlite3_bind_text(insert_entry, 1, stream, -1, SQLITE_TRANSIENT);
                sqlite3_bind_int64(insert_entry, 2, ++heads[streams[j]]);
                sqlite3_bind_int64(insert_entry, 3, i + 1);
                if (j == 1) sqlite3_bind_text(insert_entry, 4, "phone", -1, SQLITE_STATIC); else sqlite3_bind_null(insert_entry, 4);
                sqlite3_bind_text(insert_entry, 5, peer[j], -1, SQLITE_TRANSIENT);
                step(db, insert_entry);
                sqlite3_bind_text(insert_line, 1, stream, -1, SQLITE_TRANSIENT);
                sqlite3_bind_text(insert_line, 2, peer[j], -1, SQLITE_TRANSIENT);
                step(db, insert_line);
            }
        }
        ex(db, "COMMIT");
        uint64_t done = now_ns();
        // The writer's share (imgw's WALCheckpointer.finish): after the commit, before the next.
        // (Busy: the background one is copying; after the next commit, again.)
        if (atomic_exchange(&finish_wanted, 0) && sqlite3_wal_checkpoint_v2(db, "main", SQLITE_CHECKPOINT_PASSIVE, 0, 0) != SQLITE_OK)
            atomic_store(&finish_wanted, 1);
        for (long i = next; i <= last; i++) latency[i] = done - (start + (uint64_t)i * interval);
        commits++;
        next = last + 1;
    }
    struct rusage r1; getrusage(RUSAGE_SELF, &r1);
    atomic_store(&stopping, 1);
    if (background) pthread_join(thread, 0);
    double cpu = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) + (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec)
        + ((r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) + (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec)) / 1e6;
    qsort(latency, total, sizeof(uint64_t), compare);
    printf("{\"floor\":\"commit-latency\",\"checkpoints\":\"%s\",\"restart_frames\":%ld,\"rate\":%ld,\"seconds\":%ld,\"users\":%ld,\"delay_us\":%ld,"
           "\"commits\":%ld,\"per_commit\":%.1f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"cpu_us_per_msg\":%.1f}\n",
           background ? "background" : "auto", restart_frames, rate, seconds, users, delay_us, commits, (double)total / commits,
           latency[total / 2] / 1e6, latency[total * 99 / 100] / 1e6, latency[total - 1] / 1e6, cpu / total * 1e6);
    sqlite3_close(db);
    return 0;
}
