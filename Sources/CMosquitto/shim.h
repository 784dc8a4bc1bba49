#ifndef IMGATEWAY_CMOSQUITTO_SHIM_H
#define IMGATEWAY_CMOSQUITTO_SHIM_H

#include <mosquitto.h>
#include <mqtt_protocol.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <pthread.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/// Whether the headers compiled against are libmosquitto 2.0.x, whose private layouts the
/// shims below were checked against (lib/mosquitto_internal.h, 2.0.0 to 2.0.20). Without
/// them, the shims that read those layouts answer false and touch nothing; with them, the
/// linked library is checked at run time too (`MosquittoLibrary.internals`).
#if defined(LIBMOSQUITTO_VERSION_NUMBER) && LIBMOSQUITTO_VERSION_NUMBER >= 2000000 && LIBMOSQUITTO_VERSION_NUMBER < 2001000
#define CMOSQ_PRIVATE_LAYOUTS 1
#else
#define CMOSQ_PRIVATE_LAYOUTS 0
#endif

/// `CMOSQ_PRIVATE_LAYOUTS`, for Swift.
static inline bool cmosq_private_layouts_compiled(void) {
    return CMOSQ_PRIVATE_LAYOUTS;
}

/// `LIBMOSQUITTO_VERSION_NUMBER` of the headers compiled against (0 if they say none).
static inline int cmosq_compiled_version(void) {
#if defined(LIBMOSQUITTO_VERSION_NUMBER)
    return LIBMOSQUITTO_VERSION_NUMBER;
#else
    return 0;
#endif
}

/// libmosquitto 2.0's private `struct mosquitto_message_all` (lib/mosquitto_internal.h,
/// identical from 2.0.0 to 2.0.20). The `struct mosquitto_message` handed to
/// `on_message_v5` is its `msg` member; the DUP flag of the PUBLISH sits just before it
/// and is not exposed by the public API. Only read through `cmosq_message_dup`, and only
/// after checking at run time that the library is 2.0.x.
struct cmosq_message_all_v2_0 {
    void *next;
    void *prev;
    void *properties;
    time_t timestamp;
    int state;
    bool dup;
    struct mosquitto_message msg;
    uint32_t expiry_interval;
};

/// The DUP flag of a message received through `on_message_v5` (libmosquitto 2.0.x only).
static inline bool cmosq_message_dup(const struct mosquitto_message *msg) {
#if !CMOSQ_PRIVATE_LAYOUTS
    (void)msg;
    return false;
#endif
    const char *base = (const char *)msg - offsetof(struct cmosq_message_all_v2_0, msg);
    return ((const struct cmosq_message_all_v2_0 *)base)->dup;
}

/// The first members of libmosquitto 2.0's private `struct mosquitto` as the client library
/// is built (lib/mosquitto_internal.h: `sock`, then `sockpairR, sockpairW` unless
/// WITH_BROKER; the same from 2.0.0 to 2.0.20 and in 1.x).
struct cmosq_mosquitto_head_v2_0 {
    int sock;
    int sockpairR;
    int sockpairW;
};

/// Takes the internal socketpair away from a handle fresh from `mosquitto_new`, so that
/// libmosquitto stops writing a byte into it for every packet it queues (every use of the
/// pair in 2.0 first checks it against INVALID_SOCKET; 2.1 offers the same as
/// MOSQ_OPT_DISABLE_SOCKETPAIR). Only when the head holds exactly what is expected: no
/// socket yet, and the pair found by the caller (by inode and peer, outside this struct)
/// in either order. Returns true when it took them: the caller then owns (and closes)
/// both descriptors; false leaves the handle untouched.
static inline bool cmosq_detach_socketpair(struct mosquitto *mosq, int end1, int end2) {
#if !CMOSQ_PRIVATE_LAYOUTS
    (void)mosq, (void)end1, (void)end2;
    return false;
#endif
    struct cmosq_mosquitto_head_v2_0 *head = (struct cmosq_mosquitto_head_v2_0 *)mosq;
    if (head->sock != -1) {
        return false;
    }
    bool matches = (head->sockpairR == end1 && head->sockpairW == end2) || (head->sockpairR == end2 && head->sockpairW == end1);
    if (!matches) {
        return false;
    }
    head->sockpairR = -1;
    head->sockpairW = -1;
    return true;
}

/// The socketpair a handle fresh from `mosquitto_new` names in its private head (no socket
/// yet, both ends set), or false. The numbers are only a claim until the caller has checked
/// that they are a pair of unnamed AF_UNIX stream sockets and each other's peer.
static inline bool cmosq_head_socketpair(struct mosquitto *mosq, int *first, int *second) {
#if !CMOSQ_PRIVATE_LAYOUTS
    (void)mosq, (void)first, (void)second;
    return false;
#endif
    const struct cmosq_mosquitto_head_v2_0 *head = (const struct cmosq_mosquitto_head_v2_0 *)mosq;
    if (head->sock != -1 || head->sockpairR < 0 || head->sockpairW < 0 || head->sockpairR == head->sockpairW) {
        return false;
    }
    *first = head->sockpairR;
    *second = head->sockpairW;
    return true;
}

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
    if (flags < 0 || (flags & O_NONBLOCK) == 0) {
        return false;
    }
    /* libmosquitto 2.0 does not set close-on-exec on its pair; well-behaved libraries
       (Foundation, NIO) do on theirs. */
    int fdflags = fcntl(fd, F_GETFD);
    return fdflags >= 0 && (fdflags & FD_CLOEXEC) == 0;
}

/// Writes into `out` (up to `capacity`) every descriptor of this process that
/// `cmosq_is_socketpair_end` accepts, by listing /proc/self/fd. Returns how many.
static inline int cmosq_collect_socketpair_ends(int *out, int capacity) {
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL) {
        return 0;
    }
    int listing = dirfd(dir);
    int count = 0;
    struct dirent *entry;
    while (count < capacity && (entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9') {
            continue;
        }
        int fd = atoi(entry->d_name);
        if (fd != listing && cmosq_is_socketpair_end(fd)) {
            out[count++] = fd;
        }
    }
    closedir(dir);
    return count;
}

/// The inode of the socket behind `fd`, or 0.
static inline unsigned long cmosq_socket_inode(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
        return 0;
    }
    return (unsigned long)st.st_ino;
}

/// Asks the kernel (sock_diag, UNIX_DIAG_PEER) for the inode of the peer of the AF_UNIX
/// socket with inode `inode`. Returns 0 and sets `*peer`, or a negative value when the
/// kernel cannot tell (no unix_diag support, socket gone).
static inline int cmosq_unix_peer_inode(unsigned int inode, unsigned int *peer) {
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) {
        return -1;
    }
    struct {
        struct nlmsghdr nlh;
        struct unix_diag_req udr;
    } req;
    memset(&req, 0, sizeof(req));
    req.nlh.nlmsg_len = sizeof(req);
    req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.nlh.nlmsg_flags = NLM_F_REQUEST;
    req.udr.sdiag_family = AF_UNIX;
    req.udr.udiag_states = (unsigned int)-1;
    req.udr.udiag_ino = inode;
    req.udr.udiag_cookie[0] = ~0U;
    req.udr.udiag_cookie[1] = ~0U;
    req.udr.udiag_show = UDIAG_SHOW_PEER;
    if (send(fd, &req, sizeof(req), 0) < 0) {
        close(fd);
        return -2;
    }
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    close(fd);
    if (n <= 0) {
        return -3;
    }
    struct nlmsghdr *h = (struct nlmsghdr *)buf;
    if (!NLMSG_OK(h, (unsigned int)n) || h->nlmsg_type == NLMSG_ERROR) {
        return -4;
    }
    struct unix_diag_msg *msg = (struct unix_diag_msg *)NLMSG_DATA(h);
    struct rtattr *attr = (struct rtattr *)(msg + 1);
    int len = (int)h->nlmsg_len - (int)NLMSG_LENGTH(sizeof(*msg));
    for (; RTA_OK(attr, len); attr = RTA_NEXT(attr, len)) {
        if (attr->rta_type == UNIX_DIAG_PEER) {
            *peer = *(unsigned int *)RTA_DATA(attr);
            return 0;
        }
    }
    return -5;
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

/// Sets close-on-exec on `fd` (libmosquitto 2.0 opens its socket and socketpair without
/// it). Returns 0, or -1 with errno.
static inline int cmosq_set_cloexec(int fd) {
    int flags = fcntl(fd, F_GETFD);
    if (flags < 0) {
        return -1;
    }
    return (flags & FD_CLOEXEC) ? 0 : fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

/// Names the calling thread (shown by top -H, gdb, perf). Names are cut to 15 bytes.
static inline void cmosq_set_thread_name(const char *name) {
    char buf[16];
    strncpy(buf, name, sizeof(buf) - 1);
    buf[sizeof(buf) - 1] = 0;
    prctl(PR_SET_NAME, buf, 0, 0, 0);
}

#endif
