import CMosquitto
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Finds the socketpair libmosquitto 2.0 opens inside `mosquitto_new`.
///
/// With libmosquitto 2.0.x (whose private layout was checked) the handle's head names the
/// pair, and the claim is taken once the kernel confirms it: both are unnamed AF_UNIX stream
/// sockets of the shape below, no live handle owns them, and each is the other's peer
/// (sock_diag). Only when that fails, or with another version, are descriptors scanned:
///
/// libmosquitto writes a byte into that pair for every packet it queues and only its own
/// (select-based) loop reads them back; the descriptors are private (`struct mosquitto`
/// is opaque) and `MOSQ_OPT_DISABLE_SOCKETPAIR` only exists from 2.1. So:
/// - handles are created one at a time, process-wide;
/// - the candidates are unnamed, non-blocking AF_UNIX stream sockets without
///   close-on-exec (lib/net_mosq.c `net__socketpair`) that no live handle owns;
/// - only candidates that appeared during `mosquitto_new` count: the set of candidates
///   (descriptor and inode) is taken before and after the call, so a foreign socketpair
///   that merely exists at the time (Foundation's `Process` uses one while it spawns)
///   is never taken;
/// - the two must be each other's peer, as the kernel tells (sock_diag UNIX_DIAG_PEER).
/// Once found, the pair is taken away from the handle where the library's layout allows
/// (``detach(_:_:)``): libmosquitto then never writes into it, which saves two system calls
/// per packet (its write, the loop's read) and two descriptors per client. Otherwise the
/// loop drains it: the read end is `sv[0]`, the socket created first, the lower inode (the
/// loop double-checks the direction on first use, `confirmPairDirection`), and both ends
/// are made close-on-exec, so no child process inherits them.
enum SocketPairs {
    typealias Pair = (read: Int32, write: Int32)

    private struct Candidate: Hashable {
        var fd: Int32
        var inode: UInt
    }

    /// Pair descriptors owned by live handles, across every loop of the process.
    private static let known = Mutex<Set<Int32>>([])
    /// Handles whose pair had to be found by scanning descriptors (0 where the head's claim
    /// is confirmed every time).
    static let scans = Atomic<Int>(0)

    /// Runs `create` (a `mosquitto_new` call) and returns its handle and the pair the loop
    /// must drain: `nil` when the pair was detached from the handle and closed.
    static func create(_ create: () -> OpaquePointer?) throws(MosquittoError) -> (OpaquePointer?, Pair?) {
        try known.withLock { known throws(MosquittoError) in
            // Fastest path (libmosquitto 2.0.x): the handle's head names its pair; taken
            // once the kernel confirms the claim. About 20 system calls instead of the
            // hundreds a scan of descriptors costs, so a login storm does not queue here.
            if MosquittoLibrary.canDetachSocketPair {
                guard let handle = create() else { return (nil, nil) }
                if let pair = confirmedHeadPair(handle, known), detach(handle, pair) { return (handle, nil) }
                mosquitto_destroy(handle)
            }
            scans.add(1, ordering: .relaxed)
            // Fast path: descriptors are handed out lowest first, so the pair lands at or
            // near the lowest descriptor free just before the call.
            let hint = cmosq_lowest_free_fd()
            let window = max(0, hint - 32)..<max(0, hint + 64)
            let before = candidates(in: window, known)
            guard let handle = create() else { return (nil, nil) }
            if let pair = matchPeers(candidates(in: window, known).subtracting(before)) {
                if detach(handle, pair) { return (handle, nil) }
                adopt(pair, &known)
                return (handle, pair)
            }
            // Slow path (other threads moved descriptors meanwhile): the same, over every
            // descriptor of the process, with a fresh handle.
            mosquitto_destroy(handle)
            let everyBefore = allCandidates(known)
            guard let again = create() else { return (nil, nil) }
            guard let pair = matchPeers(allCandidates(known).subtracting(everyBefore)) else {
                mosquitto_destroy(again)
                throw MosquittoError.invalidState("cannot find libmosquitto's internal socketpair (descriptor limit reached?)")
            }
            if detach(again, pair) { return (again, nil) }
            adopt(pair, &known)
            return (again, pair)
        }
    }

    /// Takes the pair away from the handle and closes it, when the handle's private head
    /// holds exactly this pair (``MosquittoLibrary/detachSocketPair(_:_:)``).
    private static func detach(_ handle: OpaquePointer, _ pair: Pair) -> Bool {
        guard MosquittoLibrary.detachSocketPair(handle, pair) else { return false }
        close(pair.read)
        close(pair.write)
        return true
    }

    /// The pair the handle's head names, if the kernel confirms it: two unnamed,
    /// non-blocking AF_UNIX stream sockets without close-on-exec that no other handle
    /// owns, each the other's peer.
    private static func confirmedHeadPair(_ handle: OpaquePointer, _ known: Set<Int32>) -> Pair? {
        guard let (first, second) = MosquittoLibrary.headSocketPair(of: handle), !known.contains(first), !known.contains(second),
            cmosq_is_socketpair_end(first), cmosq_is_socketpair_end(second)
        else { return nil }
        let firstInode = cmosq_socket_inode(first)
        let secondInode = cmosq_socket_inode(second)
        var peer: UInt32 = 0
        guard firstInode != 0, secondInode != 0, cmosq_unix_peer_inode(UInt32(truncatingIfNeeded: firstInode), &peer) == 0,
            peer == UInt32(truncatingIfNeeded: secondInode)
        else { return nil }
        return (first, second)
    }

    private static func adopt(_ pair: Pair, _ known: inout Set<Int32>) {
        known.insert(pair.read)
        known.insert(pair.write)
        _ = cmosq_set_cloexec(pair.read)
        _ = cmosq_set_cloexec(pair.write)
    }

    /// Destroys a handle (closing its pair) and forgets the pair's descriptors.
    static func destroy(_ handle: OpaquePointer, pair: Pair?) {
        known.withLock { known in
            mosquitto_destroy(handle)
            if let pair {
                known.remove(pair.read)
                known.remove(pair.write)
            }
        }
    }

    private static func candidates(in range: Range<Int32>, _ known: Set<Int32>) -> Set<Candidate> {
        var result = Set<Candidate>()
        for fd in range where !known.contains(fd) && cmosq_is_socketpair_end(fd) {
            result.insert(Candidate(fd: fd, inode: cmosq_socket_inode(fd)))
        }
        return result
    }

    private static func allCandidates(_ known: Set<Int32>) -> Set<Candidate> {
        var buffer = [Int32](repeating: -1, count: 65_536)
        let count = Int(cmosq_collect_socketpair_ends(&buffer, Int32(buffer.count)))
        var result = Set<Candidate>()
        for fd in buffer.prefix(count) where !known.contains(fd) {
            result.insert(Candidate(fd: fd, inode: cmosq_socket_inode(fd)))
        }
        return result
    }

    /// Two new candidates that are each other's peer, read end (lower inode) first.
    private static func matchPeers(_ new: Set<Candidate>) -> Pair? {
        guard new.count >= 2 else { return nil }
        let sorted = new.sorted { $0.inode < $1.inode }
        let byInode = Dictionary(sorted.map { (UInt32(truncatingIfNeeded: $0.inode), $0) }, uniquingKeysWith: { first, _ in first })
        for candidate in sorted {
            var peer: UInt32 = 0
            guard cmosq_unix_peer_inode(UInt32(truncatingIfNeeded: candidate.inode), &peer) == 0 else {
                // A kernel without unix_diag: exactly two new sockets is the pair.
                return sorted.count == 2 ? (sorted[0].fd, sorted[1].fd) : nil
            }
            if let other = byInode[peer], other != candidate {
                return candidate.inode < other.inode ? (candidate.fd, other.fd) : (other.fd, candidate.fd)
            }
        }
        return nil
    }
}
