#ifndef IMGATEWAY_CMOSQUITTOIO_H
#define IMGATEWAY_CMOSQUITTOIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Batched socket I/O for libmosquitto's external loop.
 *
 * libmosquitto reads every packet with at least three read(2) calls (lib/packet_mosq.c
 * `packet__read`: the command byte, the remaining length one byte at a time, then the
 * rest) and ends each `mosquitto_loop_read` with one more that finds nothing; it writes
 * every packet with a write(2) of its own (`packet__write`), a 4-byte PUBACK included.
 * A loop that arms a reader around `mosquitto_loop_read` has those reads served from one
 * buffer, filled by one read(2) of up to its capacity; one that arms a writer around
 * `mosquitto_loop_write` has the packets gathered and sent by one write(2)
 * (`cmosq_writer_flush`).
 *
 * How: the `read`, `write` and `close` slots of libmosquitto's own global offset table
 * are pointed at `cmosq_io_read`, `cmosq_io_write` and `cmosq_io_close`
 * (`cmosq_io_install`), so nothing else in the process is affected. Each serves a call
 * from the reader or writer armed on the calling thread when the descriptor is the one it
 * was armed for, and makes the system call otherwise: libmosquitto's I/O outside an armed
 * window (and all TLS I/O, which OpenSSL makes itself) is unchanged. Closing a descriptor
 * the writer holds bytes for sends them first (libmosquitto closes the socket right after
 * it has written DISCONNECT). */

/// A read buffer for one loop thread. Bytes left in it after `mosquitto_loop_read` returns
/// belong to `fd` and must be handed to libmosquitto (arm and call again) before the
/// reader is armed for another descriptor, or dropped (`cmosq_reader_discard`) when the
/// socket is gone.
struct cmosq_reader {
    int fd;
    size_t start;
    size_t end;
    size_t capacity;
    uint64_t fills;
    unsigned char *data;
};

/// Bytes libmosquitto wrote while a writer was armed, not yet sent. The writer belongs to
/// one loop thread; between `mosquitto_loop_write` calls it holds nothing: the loop flushes
/// it, and keeps what the socket did not take itself.
struct cmosq_writer {
    int fd;
    size_t length;
    size_t capacity;
    /// write(2) calls that sent gathered bytes.
    uint64_t flushes;
    unsigned char *data;
};

/// Points libmosquitto's `read`, `write` and `close` at this module's. Idempotent and
/// thread-safe. Returns true when all three hooks are in place; false leaves libmosquitto's
/// I/O as it is (a slot not found where it was looked for: nothing is changed).
bool cmosq_io_install(void);

/// A reader with `capacity` bytes; NULL without memory.
struct cmosq_reader *cmosq_reader_create(size_t capacity);
void cmosq_reader_destroy(struct cmosq_reader *reader);

/// Arms `reader` for `fd` on the calling thread (until `cmosq_reader_disarm`). Returns
/// false, arming nothing, when the reader still holds bytes of another descriptor.
bool cmosq_reader_arm(struct cmosq_reader *reader, int fd);
void cmosq_reader_disarm(void);

/// Bytes held for the reader's descriptor.
static inline size_t cmosq_reader_pending(const struct cmosq_reader *reader) {
    return reader->end - reader->start;
}

/// Drops what the reader holds (its socket was closed).
void cmosq_reader_discard(struct cmosq_reader *reader);

/// A writer with `capacity` bytes; NULL without memory.
struct cmosq_writer *cmosq_writer_create(size_t capacity);
void cmosq_writer_destroy(struct cmosq_writer *writer);

/// Arms `writer` for `fd` on the calling thread (until `cmosq_writer_disarm`). Returns
/// false, arming nothing, when the writer still holds bytes of another descriptor.
bool cmosq_writer_arm(struct cmosq_writer *writer, int fd);
void cmosq_writer_disarm(void);

/// Sends what the writer holds with write(2) until it is empty or the socket is full.
/// Returns the bytes still held (0: all sent), or -1 with errno when the socket failed
/// (what it held is dropped).
long cmosq_writer_flush(struct cmosq_writer *writer);

/// Drops what the writer holds.
void cmosq_writer_discard(struct cmosq_writer *writer);

/// The replacements for libmosquitto's `read`, `write` and `close`.
long cmosq_io_read(int fd, void *buffer, size_t count);
long cmosq_io_write(int fd, const void *buffer, size_t count);
int cmosq_io_close(int fd);

#endif
