#ifndef IMGATEWAY_CMOSQUITTO_SHIM_H
#define IMGATEWAY_CMOSQUITTO_SHIM_H

#include <mosquitto.h>
#include <mqtt_protocol.h>

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/// True when `fd` is an unnamed, non-blocking AF_UNIX stream socket whose peer is
/// unnamed too: what libmosquitto's internal socketpair looks like (lib/net_mosq.c
/// `net__socketpair`). Used to find that pair right after `mosquitto_new`.
static inline bool cmosq_is_socketpair_end(int fd) {
    int type = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) {
        return false;
    }
    struct sockaddr_un addr;
    len = sizeof(addr);
    if (getsockname(fd, (struct sockaddr *)&addr, &len) != 0 || addr.sun_family != AF_UNIX
        || len != sizeof(sa_family_t)) {
        return false;
    }
    len = sizeof(addr);
    if (getpeername(fd, (struct sockaddr *)&addr, &len) != 0 || addr.sun_family != AF_UNIX
        || len != sizeof(sa_family_t)) {
        return false;
    }
    int flags = fcntl(fd, F_GETFL);
    return flags >= 0 && (flags & O_NONBLOCK) != 0;
}

/// Bytes waiting to be read on `fd` (FIONREAD), or -1.
static inline int cmosq_pending_bytes(int fd) {
    int n = 0;
    if (ioctl(fd, FIONREAD, &n) != 0) {
        return -1;
    }
    return n;
}

/// Reads and discards everything waiting on a non-blocking descriptor.
/// Returns the number of bytes discarded.
static inline long cmosq_drain(int fd) {
    char buf[4096];
    long total = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n > 0) {
            total += n;
            if ((size_t)n < sizeof(buf)) {
                return total;
            }
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            return total;
        }
    }
}

/// The lowest descriptor number that is free right now (a hint: other threads may take
/// it at any moment), or -1.
static inline int cmosq_lowest_free_fd(void) {
    int fd = fcntl(0, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        fd = dup(2);
        if (fd < 0) {
            return -1;
        }
    }
    close(fd);
    return fd;
}

#endif
