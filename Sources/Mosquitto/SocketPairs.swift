import CMosquitto
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Finds the socketpair libmosquitto 2.0 opens inside `mosquitto_new`.
///
/// libmosquitto writes a byte into that pair for every packet it queues and only its own
/// (select-based) loop reads them back; the descriptors are private (`struct mosquitto`
/// is opaque) and `MOSQ_OPT_DISABLE_SOCKETPAIR` only exists from 2.1. So: create handles
/// one at a time process-wide, look for the two new unnamed, non-blocking,
/// not-close-on-exec AF_UNIX stream sockets (lib/net_mosq.c `net__socketpair`: read end
/// first), and prove they are one pair by sending a byte through it.
enum SocketPairs {
    /// Pair descriptors owned by live handles, across every loop of the process.
    private static let known = Mutex<Set<Int32>>([])

    /// Runs `create` (a `mosquitto_new` call) and returns its handle and pair.
    static func create(_ create: () -> OpaquePointer?) throws(MosquittoError) -> (OpaquePointer?, (read: Int32, write: Int32)?) {
        try known.withLock { known throws(MosquittoError) in
            let hint = cmosq_lowest_free_fd()
            guard let handle = create() else { return (nil, nil) }
            guard let pair = fromHint(hint, known) ?? byScanning(known) else {
                mosquitto_destroy(handle)
                throw MosquittoError.invalidState("cannot find libmosquitto's internal socketpair (descriptor limit reached?)")
            }
            known.insert(pair.read)
            known.insert(pair.write)
            return (handle, pair)
        }
    }

    /// Destroys a handle (closing its pair) and forgets the pair's descriptors.
    static func destroy(_ handle: OpaquePointer, pair: (read: Int32, write: Int32)?) {
        known.withLock { known in
            mosquitto_destroy(handle)
            if let pair {
                known.remove(pair.read)
                known.remove(pair.write)
            }
        }
    }

    /// Fast path: descriptors are handed out lowest first, so the pair normally sits
    /// at the lowest free descriptor seen just before the call, or near it when other
    /// threads open or close descriptors meanwhile.
    private static func fromHint(_ hint: Int32, _ known: Set<Int32>) -> (read: Int32, write: Int32)? {
        guard hint >= 0 else { return nil }
        var found: [Int32] = []
        var fd = max(0, hint - 32)
        while fd < hint + 64 && found.count < 2 {
            if !known.contains(fd) && cmosq_is_socketpair_end(fd) { found.append(fd) }
            fd += 1
        }
        guard found.count == 2, isPair(read: found[0], write: found[1]) else { return nil }
        return (found[0], found[1])
    }

    /// Slow path (another thread took descriptors meanwhile): every descriptor.
    private static func byScanning(_ known: Set<Int32>) -> (read: Int32, write: Int32)? {
        var buffer = [Int32](repeating: -1, count: 65_536)
        let count = Int(cmosq_collect_socketpair_ends(&buffer, Int32(buffer.count)))
        let candidates = buffer.prefix(count).filter { !known.contains($0) }.sorted()
        for read in candidates {
            for write in candidates where write != read && isPair(read: read, write: write) {
                return (read, write)
            }
        }
        return nil
    }

    private static func isPair(read: Int32, write: Int32) -> Bool {
        var byte: UInt8 = 0
        guard send(write, &byte, 1, Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL)) == 1 else { return false }
        // libmosquitto ignores what it reads from its pair, so a stray zero byte is harmless.
        let arrived = cmosq_pending_bytes(read) >= 1
        if arrived { cmosq_drain(read) }
        return arrived
    }
}
