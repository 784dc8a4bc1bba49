import CMosquitto

#if canImport(Glibc)
import Glibc
#endif

/// One round of libmosquitto's external loop, as a C program drives it: `poll` every handle's
/// socket (and an eventfd that wakes the loop), then `mosquitto_loop_read` where there is
/// something to read, `mosquitto_loop_write` where there is room and for every handle that
/// has something queued. Handles without a socket are left out of the poll (a negative fd).
enum RawLoopRound {
    /// Runs one round; `fds` is reused between rounds (resized here).
    static func run(_ handles: [OpaquePointer], fds: inout [pollfd], wakeFD: Int32, timeoutMilliseconds: Int32) {
        if fds.count != handles.count + 1 { fds = [pollfd](repeating: pollfd(), count: handles.count + 1) }
        for (index, handle) in handles.enumerated() {
            fds[index] = pollfd(fd: mosquitto_socket(handle), events: Int16(POLLIN) | (mosquitto_want_write(handle) ? Int16(POLLOUT) : 0), revents: 0)
        }
        fds[handles.count] = pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)
        _ = poll(&fds, nfds_t(fds.count), timeoutMilliseconds)
        if fds[handles.count].revents != 0 {
            var value: UInt64 = 0
            _ = read(wakeFD, &value, 8)
        }
        for (index, handle) in handles.enumerated() {
            let events = Int32(fds[index].revents)
            if events & (Int32(POLLIN) | Int32(POLLHUP) | Int32(POLLERR)) != 0 { mosquitto_loop_read(handle, 1) }
            if events & Int32(POLLOUT) != 0 { mosquitto_loop_write(handle, 1) }
        }
        // Publishes and acknowledgements the callbacks queued leave now.
        for handle in handles where mosquitto_socket(handle) >= 0 && mosquitto_want_write(handle) { mosquitto_loop_write(handle, 1) }
    }
}
