import AsyncToolkit
import CMosquitto
import CMosquittoIO
import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One thread that drives any number of libmosquitto clients with epoll, through
/// libmosquitto's external-loop API (`mosquitto_socket`, `mosquitto_loop_read`,
/// `mosquitto_want_write` + `mosquitto_loop_write`, `mosquitto_loop_misc`).
///
/// It never calls `mosquitto_loop`, `mosquitto_loop_forever` or `mosquitto_loop_start`:
/// those use `select` and fail once a descriptor passes 1024. libmosquitto writes a byte
/// into each client's internal socketpair for every packet it queues, and only its own
/// loop reads it back: this loop takes the pair away from the handle where it can (every
/// 2.0.x, `SocketPairs`), so a client costs one descriptor and no wake-up writes, and
/// otherwise drains it, so that kernel memory does not pile up per client.
///
/// The loop is also the `SerialExecutor` of every `MosquittoClient` it drives: client
/// methods run on the loop thread, next to the callbacks, so no lock guards client state.
/// Its ``taskExecutor`` runs tasks on the loop thread too: a task started with
/// `executorPreference: loop.taskExecutor` runs its nonisolated code there, so awaiting a
/// client's methods costs no thread switch either way.
/// Blocking work (name resolution, the TCP connect) runs on a separate queue.
///
/// Hand-written because neither libmosquitto's own loops (`select`, a thread per client with
/// `mosquitto_loop_start`) nor SwiftNIO's (which own their channels' sockets; libmosquitto
/// reads and writes its socket itself) can drive libmosquitto clients by the thousand.
///
/// epoll watches open file descriptions, not descriptor numbers (epoll(7), Q6): a
/// descriptor closed while another process still holds a copy of it stays in the interest
/// list, and being level-triggered, keeps reporting (a half-closed socket: EPOLLIN|EPOLLHUP)
/// with no descriptor left to remove it by. So:
/// - every descriptor the loop watches is close-on-exec (libmosquitto's socket and
///   socketpair are marked right after they are created), and the loop removes a socket
///   from epoll before it makes libmosquitto close it, wherever it can (abort, reconnect,
///   destroy);
/// - every registration carries a token of its own (a serial number, never reused), so an
///   event always names exactly what was registered; libmosquitto closes its socket by
///   itself too (a read error, a keepalive timeout, after writing DISCONNECT), and an event
///   for a registration the loop no longer has is never ignored: if it comes again from
///   the next `epoll_wait`, the registration outlived its descriptor, and the loop replaces
///   its epoll instance with one that holds only what it knows
///   (``Statistics/epollRebuilds``).
public final class MosquittoEventLoop: SerialExecutor, TaskExecutor, @unchecked Sendable {
    // @unchecked Sendable: `inbox` is a Mutex, `threadID` an Atomic, `epollFD`/`wakeFD`/
    // `connector` are immutable. Every other stored property is touched only on the loop
    // thread: by the loop itself or by jobs it runs (`assertOnLoop()` checks the callers).
    // Once the loop thread has ended (`inbox.ended`, set under the lock as its last act),
    // the jobs still submitted run on one drain thread at a time (`inbox.draining`, taken
    // and released under the lock), which stores its id in `threadID` first: still one
    // thread at a time, each after the previous one's last access through the lock.

    /// The process-wide loop, started on first use, never stopped.
    public static let shared = MosquittoEventLoop(name: "mosquitto-loop")

    private enum Work {
        /// A job of a client (this loop as its serial executor) or of a task that prefers
        /// the loop (``taskExecutor``): either runs isolated to the loop, on its thread.
        case job(UnownedJob)
        case closure(@Sendable () -> Void)
    }

    /// The loop as a task executor: tasks started with `executorPreference:` it run their
    /// nonisolated code on the loop thread (the loop is both kinds of executor).
    public var taskExecutor: some TaskExecutor { self }

    private struct Inbox {
        var work: [Work] = []
        var wakePending = false
        var stopping = false
        /// The loop thread has ended: work goes to a drain thread instead.
        var ended = false
        /// A drain thread is running (at most one: jobs stay serial).
        var draining = false
    }

    private let inbox = Mutex(Inbox())
    /// Whether the loop thread has ended, for ``waitForStop()``.
    private let ended = AsyncCondition(false)
    private let threadID = Atomic<UInt>(0)
    /// Replaced (on the loop thread) when a registration outlived its descriptor.
    private var epollFD: Int32
    private let wakeFD: Int32
    /// Serves libmosquitto's small reads of one socket from one read(2), and gathers its
    /// writes of one `mosquitto_loop_write` into one write(2) (nil: libmosquitto's I/O is
    /// not hooked, `MosquittoLibrary.batchesIO`).
    private let reader: UnsafeMutablePointer<cmosq_reader>?
    private let writer: UnsafeMutablePointer<cmosq_writer>?
    /// Runs blocking connects (getaddrinfo, socket setup) off the loop thread.
    let connector = DispatchQueue(label: "mosquitto.connect")

    // Loop-thread state.
    private var registrations: [ClientIO?] = []
    private var freeSlots: [Int] = []
    private var dirty: [ClientIO] = []
    private var nextTick: UInt64 = 0
    private var stopped = false
    /// The serial number of the next registration (tokens are never reused).
    private var nextSerial: UInt32 = 0
    /// Tokens of events the loop could not place, in this `epoll_wait` round and the one
    /// before.
    private var unplacedNow: Set<UInt64> = []
    private var unplacedBefore: Set<UInt64> = []
    /// A rebuild failed (no descriptor left for a new epoll instance): retried each round.
    private var rebuildPending = false
    private var epollRebuilds = 0
    /// Run once the loop has handled what is ready (``afterCurrentTurn(_:)``).
    private var endOfTurn: [() -> Void] = []

    private static let wakeToken = UInt64.max
    private static let tickNanoseconds: UInt64 = 1_000_000_000

    /// Starts a loop on a new thread.
    public init(name: String = "mosquitto-loop") {
        _ = MosquittoLibrary.initialized
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        precondition(epollFD >= 0, "epoll_create1 failed: errno \(errno)")
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
        reader = MosquittoLibrary.makeBatchedReader(capacity: Self.readCapacity)
        writer = MosquittoLibrary.makeBatchedWriter(capacity: Self.writeCapacity)
        precondition(wakeFD >= 0, "eventfd failed: errno \(errno)")
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.u64 = Self.wakeToken
        precondition(epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event) == 0)
        startPosixThread(name: name) { [self] in
            threadID.store(UInt(pthread_self()), ordering: .releasing)
            run()
        }
    }

    /// True on the loop's own thread.
    public var inLoop: Bool {
        let id = threadID.load(ordering: .acquiring)
        return id != 0 && pthread_equal(pthread_t(id), pthread_self()) != 0
    }

    @inline(__always)
    func assertOnLoop() {
        assert(inLoop, "must run on the Mosquitto event loop thread")
    }

    // MARK: SerialExecutor and TaskExecutor

    /// Runs `job` (a client's, or one of a task that prefers the loop) on the loop thread.
    public func enqueue(_ job: consuming ExecutorJob) {
        submit(.job(UnownedJob(job)))
    }

    public func checkIsolated() {
        precondition(inLoop, "not on the Mosquitto event loop thread")
    }

    /// Runs `body` on the loop thread, soon.
    public func execute(_ body: @escaping @Sendable () -> Void) {
        submit(.closure(body))
    }

    /// Runs `body` on the loop thread once the loop has handled everything that is ready now
    /// (every readable socket, every queued job), before it waits again. What the callbacks
    /// of one turn produce can so be handed on once: one wake-up of another thread per turn
    /// instead of one per message. Loop thread only (a callback, a client method, a job).
    public func afterCurrentTurn(_ body: @escaping () -> Void) {
        assertOnLoop()
        endOfTurn.append(body)
    }

    /// Runs what ``afterCurrentTurn(_:)`` gathered, including what that adds.
    private func finishTurn() {
        while !endOfTurn.isEmpty {
            let bodies = endOfTurn
            endOfTurn.removeAll(keepingCapacity: true)
            for body in bodies { body() }
        }
    }

    /// Runs `body` on the loop thread and returns its result.
    public func submit<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            execute { continuation.resume(returning: body()) }
        }
    }

    private func submit(_ work: Work) {
        enum Next { case nothing, wake, drain }
        let next = inbox.withLock { inbox -> Next in
            inbox.work.append(work)
            if inbox.ended {
                if inbox.draining { return .nothing }
                inbox.draining = true
                return .drain
            }
            if inbox.wakePending { return .nothing }
            inbox.wakePending = true
            return .wake
        }
        switch next {
        case .nothing:
            break
        case .wake:
            if !inLoop {
                var one: UInt64 = 1
                _ = Glibc.write(wakeFD, &one, 8)
            }
        case .drain:
            startPosixThread(name: "mosquitto-drain") { [self] in
                threadID.store(UInt(pthread_self()), ordering: .releasing)
                drain()
            }
        }
    }

    /// After the loop thread ended: runs the work submitted since, then returns once none
    /// is left. A client whose loop was shut down can still be called (its methods are
    /// jobs on this executor); they find it closed instead of waiting forever.
    private func drain() {
        while true {
            let batch = inbox.withLock { inbox -> [Work] in
                if inbox.work.isEmpty {
                    inbox.draining = false
                    return []
                }
                defer { inbox.work.removeAll(keepingCapacity: true) }
                return inbox.work
            }
            if batch.isEmpty { return }
            perform(batch)
            finishTurn()
        }
    }

    /// Stops the loop thread once the clients registered on it are closed. The shared
    /// loop is never stopped. Its clients can still be called afterwards (a closed client
    /// answers at once, as closed); connecting one fails with `.invalidState`.
    public func shutdown() {
        inbox.withLock { $0.stopping = true }
        var one: UInt64 = 1
        _ = Glibc.write(wakeFD, &one, 8)
    }

    /// Returns once the loop thread has ended (after ``shutdown()``, once its clients are
    /// closed).
    public func waitForStop() async {
        _ = await ended.wait { $0 }
    }

    // MARK: The loop

    private func run() {
        let capacity = 1024
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        nextTick = monotonicNanoseconds() + Self.tickNanoseconds
        while !stopped {
            runWork()
            flushDirty()
            finishTurn()
            let (pending, stopping) = inbox.withLock { ($0.work.isEmpty == false, $0.stopping) }
            if stopping && registrations.allSatisfy({ $0 == nil }) {
                stopped = true
                break
            }
            let now = monotonicNanoseconds()
            let timeout: Int32 = pending ? 0 : Int32(clamping: (nextTick > now ? nextTick - now : 0) / 1_000_000 + 1)
            let count = epoll_wait(epollFD, events, Int32(capacity), timeout)
            if count > 0 {
                for index in 0..<Int(count) {
                    handle(events[index])
                }
            }
            unplacedBefore = unplacedNow
            unplacedNow.removeAll(keepingCapacity: true)
            if rebuildPending {
                rebuildEpoll()
                // Still stuck with a registration that keeps reporting: do not spin.
                if rebuildPending { usleep(10_000) }
            }
            flushDirty()
            if monotonicNanoseconds() >= nextTick {
                tick()
                nextTick = monotonicNanoseconds() + Self.tickNanoseconds
            }
            finishTurn()
        }
        // Work submitted from now on is run by a drain thread; what came before is run
        // here. (The descriptors stay open until deinit: a submit may still be writing to
        // wakeFD.)
        let leftover = inbox.withLock { inbox in
            inbox.ended = true
            inbox.draining = !inbox.work.isEmpty
            return inbox.draining
        }
        ended.withLock { $0 = true }
        if leftover { drain() }
    }

    deinit {
        close(epollFD)
        close(wakeFD)
        MosquittoLibrary.destroyBatched(reader, writer)
    }

    private func perform(_ batch: [Work]) {
        for work in batch {
            switch work {
            case .job(let job): job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
            case .closure(let body): body()
            }
        }
    }

    private func runWork() {
        // A few rounds: work may enqueue more work (a resumed task running on a client).
        for _ in 0..<4 {
            let batch = inbox.withLock { inbox -> [Work] in
                inbox.wakePending = false
                defer { inbox.work.removeAll(keepingCapacity: true) }
                return inbox.work
            }
            if batch.isEmpty { return }
            perform(batch)
        }
    }

    private func handle(_ event: epoll_event) {
        let token = event.data.u64
        if token == Self.wakeToken {
            var value: UInt64 = 0
            _ = read(wakeFD, &value, 8)
            return
        }
        let slot = Int((token >> 2) & 0x3FFF_FFFF)
        guard slot < registrations.count, let io = registrations[slot] else {
            unplaced(token)
            return
        }
        if token == io.pairToken {
            cmosq_drain(io.pairRead)
            markDirty(io)
            return
        }
        guard token == io.socketToken, io.socketFD >= 0, !io.ownedByConnector else {
            unplaced(token)
            return
        }
        if mosquitto_socket(io.mosq) != io.socketFD {
            // libmosquitto closed (or replaced) the socket during a call not followed by
            // a reconcile: follow it now. A registration left behind reports again, and
            // is dealt with as unplaced.
            reconcileSocket(io)
            markDirty(io)
            return
        }
        let flags = event.events
        io.tcpConnected = true
        if flags & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
            readAvailable(io)
        } else if flags & EPOLLOUT.rawValue != 0 && io.tlsHandshaking {
            // libmosquitto advances a TLS handshake only from loop_read (lib/loop.c).
            readAvailable(io)
        }
        markDirty(io)
    }

    /// An event for a registration the loop no longer has. Usually it was removed (or its
    /// descriptor closed) earlier in the same batch of events, and it will not come again.
    /// If it does come again from the next `epoll_wait`, the registration outlived its
    /// descriptor (another process holds a copy of the open file description): nothing can
    /// remove it by descriptor any more, so the epoll instance is replaced.
    private func unplaced(_ token: UInt64) {
        if unplacedBefore.contains(token) || unplacedNow.contains(token) {
            rebuildEpoll()
        } else {
            unplacedNow.insert(token)
        }
    }

    /// Replaces the epoll instance with a new one that watches exactly the registrations
    /// the loop knows, which drops every registration that outlived its descriptor.
    private func rebuildEpoll() {
        let fresh = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard fresh >= 0 else {
            rebuildPending = true
            return
        }
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.u64 = Self.wakeToken
        _ = epoll_ctl(fresh, EPOLL_CTL_ADD, wakeFD, &event)
        for case let io? in registrations {
            if io.pairRead >= 0 {
                event.events = EPOLLIN.rawValue
                event.data.u64 = io.pairToken
                _ = epoll_ctl(fresh, EPOLL_CTL_ADD, io.pairRead, &event)
            }
            if io.socketFD >= 0 {
                event.events = io.interest
                event.data.u64 = io.socketToken
                if epoll_ctl(fresh, EPOLL_CTL_ADD, io.socketFD, &event) != 0 {
                    io.socketFD = -1
                    io.socketToken = 0
                    io.interest = 0
                    markDirty(io)
                }
            }
        }
        close(epollFD)
        epollFD = fresh
        rebuildPending = false
        unplacedNow.removeAll()
        unplacedBefore.removeAll()
        epollRebuilds += 1
    }

    /// A token for a new registration of `io`'s descriptor of `kind`.
    private func newToken(_ io: ClientIO, kind: UInt64) -> UInt64 {
        nextSerial &+= 1
        if nextSerial == 0 { nextSerial = 1 }
        return UInt64(nextSerial) << 32 | UInt64(io.slot) << 2 | kind
    }

    private static let readCapacity = 64 * 1024
    private static let writeCapacity = 64 * 1024

    private func readAvailable(_ io: ClientIO) {
        let fd = io.socketFD
        let batched = MosquittoLibrary.readBatched(
            reader, fd: fd, readPacket: { mosquitto_loop_read(io.mosq, 1) }, sameSocket: { mosquitto_socket(io.mosq) == fd })
        afterIO(io, batched ?? mosquitto_loop_read(io.mosq, 1))
    }

    /// After a read/write/misc call: report failures libmosquitto did not report through
    /// `on_disconnect` (a failed TLS handshake closes the socket silently) and follow the
    /// socket if libmosquitto closed it.
    private func afterIO(_ io: ClientIO, _ rc: Int32) {
        if rc != 0 {
            io.client?.ioFailed(rc)
        }
        reconcileSocket(io)
    }

    func markDirty(_ io: ClientIO) {
        if !io.isDirty {
            io.isDirty = true
            dirty.append(io)
        }
    }

    /// Writes what each dirty client has queued (unless it holds its writes) and keeps
    /// its epoll interest in step with `mosquitto_want_write`.
    private func flushDirty() {
        while !dirty.isEmpty {
            let batch = dirty
            dirty.removeAll(keepingCapacity: true)
            for io in batch {
                io.isDirty = false
                guard io.isRegistered, !io.ownedByConnector else { continue }
                if io.socketFD >= 0 && !io.unsent.isEmpty {
                    writeUnsent(io)
                }
                if io.socketFD >= 0 && io.unsent.isEmpty && !io.holdWrites && mosquitto_want_write(io.mosq)
                    && !(io.tlsHandshaking && !io.tcpConnected) {
                    writeQueued(io)
                }
                // Every packet libmosquitto queued wrote a byte into the pair; whatever
                // made this client dirty is done, so drain now rather than on the next
                // epoll round (the pair's epoll registration remains the safety net).
                if io.pairRead >= 0 {
                    if !io.pairConfirmed { confirmPairDirection(io) }
                    cmosq_drain(io.pairRead)
                }
                updateInterest(io)
            }
        }
    }

    /// Writes every packet the client has queued.
    ///
    /// libmosquitto writes each packet with a write(2) of its own (lib/packet_mosq.c
    /// `packet__write`), and with TCP_NODELAY each would leave as a TCP segment of its own:
    /// more system calls, and more segments for both ends to process (on loopback the
    /// receiver's share is charged to the sender). With the writer armed, the packets of
    /// one call are gathered and sent by one write(2); what the socket does not take waits
    /// in ``ClientIO/unsent`` and goes first when it is writable again. Without it (TLS,
    /// whose records OpenSSL writes itself, or no hook) the socket is corked for the call:
    /// the packets leave together when it is uncorked, at once.
    private func writeQueued(_ io: ClientIO) {
        let fd = io.socketFD
        if io.usesTLS == false,
           let rc = MosquittoLibrary.writeBatched(
               writer, fd: fd, writePackets: { mosquitto_loop_write(io.mosq, 1) }, sameSocket: { mosquitto_socket(io.mosq) == fd },
               unsent: { io.unsent.append(contentsOf: $0) })
        {
            afterIO(io, rc)
            return
        }
        let corked = Self.setCork(fd, true)
        let rc = mosquitto_loop_write(io.mosq, 1)
        // If libmosquitto closed the socket meanwhile (after DISCONNECT, on an error),
        // closing sent what the cork held, and the number may already be another's.
        if corked && mosquitto_socket(io.mosq) == fd {
            _ = Self.setCork(fd, false)
        }
        afterIO(io, rc)
    }

    /// Sends what the socket did not take of an earlier gathered write.
    private func writeUnsent(_ io: ClientIO) {
        let fd = io.socketFD
        let wrote = io.unsent.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        if wrote > 0 {
            io.unsent.removeFirst(wrote)
        } else if wrote < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR {
            // The next read reports the failure.
            io.unsent = []
        }
    }

    private static func setCork(_ fd: Int32, _ on: Bool) -> Bool {
        var value: Int32 = on ? 1 : 0
        return setsockopt(fd, Int32(IPPROTO_TCP), TCP_CORK, &value, socklen_t(MemoryLayout<Int32>.size)) == 0
    }

    private static func isCorked(_ fd: Int32) -> Bool {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        return getsockopt(fd, Int32(IPPROTO_TCP), TCP_CORK, &value, &length) == 0 && value != 0
    }

    /// libmosquitto writes into its pair's write end; the first byte seen tells which end
    /// that is (SocketPairs guesses the read end by inode order).
    private func confirmPairDirection(_ io: ClientIO) {
        guard cmosq_socket_inode(io.pairRead) == io.pairInodes.read, cmosq_socket_inode(io.pairWrite) == io.pairInodes.write else {
            // Cannot happen while the handle lives (libmosquitto closes its pair only in
            // mosquitto_destroy); if it did, touching these numbers could hit other files.
            assertionFailure("libmosquitto's socketpair changed under client \(io.slot)")
            io.pairRead = -1
            return
        }
        if cmosq_pending_bytes(io.pairRead) > 0 {
            io.pairConfirmed = true
        } else if cmosq_pending_bytes(io.pairWrite) > 0 {
            _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, io.pairRead, nil)
            swap(&io.pairRead, &io.pairWrite)
            io.pairInodes = (io.pairInodes.write, io.pairInodes.read)
            var event = epoll_event()
            event.events = EPOLLIN.rawValue
            io.pairToken = newToken(io, kind: ClientIO.pairKind)
            event.data.u64 = io.pairToken
            _ = epoll_ctl(epollFD, EPOLL_CTL_ADD, io.pairRead, &event)
            io.pairConfirmed = true
        }
    }

    private func updateInterest(_ io: ClientIO) {
        guard io.socketFD >= 0 else { return }
        var wanted = EPOLLIN.rawValue
        if !io.unsent.isEmpty {
            wanted |= EPOLLOUT.rawValue
        } else if !io.holdWrites && mosquitto_want_write(io.mosq) {
            // During a TLS handshake libmosquitto keeps want_write set while it waits to
            // read (upstream #942): once TCP is up, only readability moves it on.
            if !(io.tlsHandshaking && io.tcpConnected) {
                wanted |= EPOLLOUT.rawValue
            }
        } else if !io.tcpConnected {
            wanted |= EPOLLOUT.rawValue
        }
        if wanted != io.interest {
            var event = epoll_event()
            event.events = wanted
            event.data.u64 = io.socketToken
            if epoll_ctl(epollFD, EPOLL_CTL_MOD, io.socketFD, &event) == 0 {
                io.interest = wanted
            }
        }
    }

    /// Keepalive (PINGREQ, timeouts) and connect deadlines, once a second.
    private func tick() {
        let now = monotonicNanoseconds()
        for case let io? in registrations where !io.ownedByConnector {
            if let deadline = io.connectDeadline, now >= deadline {
                io.connectDeadline = nil
                io.client?.connectTimedOut()
                continue
            }
            if io.socketFD >= 0 {
                let rc = mosquitto_loop_misc(io.mosq)
                if rc != Int32(MOSQ_ERR_NO_CONN.rawValue) {
                    afterIO(io, rc)
                }
                markDirty(io)
            }
        }
        flushDirty()
    }

    // MARK: Registration

    /// Creates a libmosquitto handle on the loop thread, finds its socketpair and starts
    /// draining it.
    func register(
        clientID: String, cleanStart: Bool, client: MosquittoClient
    ) throws(MosquittoError) -> ClientIO {
        assertOnLoop()
        guard !stopped else { throw .invalidState("its event loop was shut down") }
        let userdata = Unmanaged.passUnretained(client).toOpaque()
        let (handle, pair) = try SocketPairs.create { mosquitto_new(clientID, cleanStart, userdata) }
        guard let mosq = handle else {
            throw errno == EINVAL ? .invalidArgument("client id \"\(clientID)\"") : .code(Int32(MOSQ_ERR_NOMEM.rawValue))
        }
        let slot = freeSlots.popLast() ?? { registrations.append(nil); return registrations.count - 1 }()
        let io = ClientIO(mosq: mosq, slot: slot, client: client)
        if let pair {
            io.pairRead = pair.read
            io.pairWrite = pair.write
            io.pairInodes = (cmosq_socket_inode(pair.read), cmosq_socket_inode(pair.write))
            var event = epoll_event()
            event.events = EPOLLIN.rawValue
            io.pairToken = newToken(io, kind: ClientIO.pairKind)
            event.data.u64 = io.pairToken
            _ = epoll_ctl(epollFD, EPOLL_CTL_ADD, pair.read, &event)
        }
        registrations[slot] = io
        io.isRegistered = true
        return io
    }

    /// Stops watching a client's descriptors (before libmosquitto closes them) and
    /// destroys its libmosquitto handle.
    func unregister(_ io: ClientIO) {
        assertOnLoop()
        guard io.isRegistered else { return }
        forgetSocket(io)
        if io.pairRead >= 0 {
            _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, io.pairRead, nil)
            io.pairToken = 0
        }
        registrations[io.slot] = nil
        freeSlots.append(io.slot)
        io.isRegistered = false
        io.client = nil
        SocketPairs.destroy(io.mosq, pair: io.pairRead >= 0 ? (io.pairRead, io.pairWrite) : nil)
    }

    /// Follows libmosquitto's socket: registers a new one, forgets a closed one. The
    /// kernel drops a closed descriptor from the epoll set only when no other process
    /// holds the same open file description; a registration left behind is found by its
    /// token (``unplaced(_:)``).
    func reconcileSocket(_ io: ClientIO) {
        guard io.isRegistered else { return }
        let current = mosquitto_socket(io.mosq)
        if current == io.socketFD { return }
        io.unsent = []
        io.socketFD = -1
        io.socketToken = 0
        io.interest = 0
        io.tcpConnected = false
        guard current >= 0 else { return }
        var event = epoll_event()
        event.events = EPOLLIN.rawValue | EPOLLOUT.rawValue
        let token = newToken(io, kind: ClientIO.socketKind)
        event.data.u64 = token
        if epoll_ctl(epollFD, EPOLL_CTL_ADD, current, &event) == 0 {
            io.socketFD = current
            io.socketToken = token
            io.interest = event.events
        }
    }

    /// Stops watching the client's socket while it is still open: before libmosquitto
    /// replaces it (reconnect), closes it on our behalf (abort) or is destroyed.
    func forgetSocket(_ io: ClientIO) {
        if io.socketFD >= 0 {
            _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, io.socketFD, nil)
        }
        io.unsent = []
        io.socketFD = -1
        io.socketToken = 0
        io.interest = 0
        io.tcpConnected = false
    }

    // MARK: Statistics

    /// What the loop holds right now.
    public struct Statistics: Sendable, Hashable {
        /// Clients with a libmosquitto handle on this loop.
        public var clients: Int
        /// Clients whose TCP socket is open.
        public var connectedSockets: Int
        /// Bytes waiting in the clients' internal socketpairs, summed and at most.
        public var socketPairBacklogBytes: Int
        public var maxSocketPairBacklogBytes: Int
        /// Times the loop replaced its epoll instance because a registration outlived its
        /// descriptor (a copy of a socket held by another process); 0 normally.
        public var epollRebuilds: Int
        /// Clients whose socket is corked (TCP_CORK) between the loop's writes: always 0,
        /// or packets wait up to 200 ms for the kernel to send them.
        public var corkedSockets: Int
        /// Whether libmosquitto's reads and writes of plain TCP sockets are batched
        /// (``MosquittoLibrary/batchesIO``).
        public var batchesIO: Bool
        /// read(2) calls that filled the loop's read buffer, and write(2) calls that sent
        /// gathered packets, since the loop started (0 without batching).
        public var batchedReads: UInt64
        public var batchedWrites: UInt64
        /// Bytes written by libmosquitto that wait for their socket to take them.
        public var unsentBytes: Int
    }

    /// Counts clients, the socketpair backlog and corked sockets, on the loop thread.
    public func statistics() async -> Statistics {
        await submit { [self] in
            flushDirty()
            var stats = Statistics(
                clients: 0, connectedSockets: 0, socketPairBacklogBytes: 0, maxSocketPairBacklogBytes: 0, epollRebuilds: epollRebuilds,
                corkedSockets: 0, batchesIO: reader != nil && writer != nil, batchedReads: reader?.pointee.fills ?? 0,
                batchedWrites: writer?.pointee.flushes ?? 0, unsentBytes: 0)
            for case let io? in registrations {
                stats.clients += 1
                stats.unsentBytes += io.unsent.count
                if io.socketFD >= 0 {
                    stats.connectedSockets += 1
                    if Self.isCorked(io.socketFD) { stats.corkedSockets += 1 }
                }
                if io.pairRead >= 0 {
                    let backlog = max(0, Int(cmosq_pending_bytes(io.pairRead)))
                    stats.socketPairBacklogBytes += backlog
                    stats.maxSocketPairBacklogBytes = max(stats.maxSocketPairBacklogBytes, backlog)
                }
            }
            return stats
        }
    }
}

/// A client's libmosquitto handle and descriptors, as the loop sees them. Loop-thread
/// only.
final class ClientIO {
    static let socketKind: UInt64 = 0
    static let pairKind: UInt64 = 1

    let mosq: OpaquePointer
    let slot: Int
    /// The epoll tokens of the current registrations (0: none).
    var socketToken: UInt64 = 0
    var pairToken: UInt64 = 0
    /// The client, for callbacks from the loop; nil once unregistered.
    var client: MosquittoClient?
    var pairRead: Int32 = -1
    var pairWrite: Int32 = -1
    /// The pair's socket inodes (to notice a descriptor number that changed files).
    var pairInodes: (read: UInt, write: UInt) = (0, 0)
    /// Whether a byte has shown which end of the pair libmosquitto writes to.
    var pairConfirmed = false
    var socketFD: Int32 = -1
    var interest: UInt32 = 0
    var isRegistered = false
    var isDirty = false
    /// A blocking connect runs on the connector queue: the loop keeps its hands off.
    var ownedByConnector = false
    /// Ack-through: nothing queued is written while set.
    var holdWrites = false
    /// Bytes libmosquitto wrote (through the loop's writer) that the socket has not taken
    /// yet: they go before anything libmosquitto writes next.
    var unsent: [UInt8] = []
    /// The client connects with TLS (OpenSSL writes its records itself).
    var usesTLS = false
    var tcpConnected = false
    /// TLS client that has not received CONNACK yet.
    var tlsHandshaking = false
    var connectDeadline: UInt64?

    init(mosq: OpaquePointer, slot: Int, client: MosquittoClient) {
        self.mosq = mosq
        self.slot = slot
        self.client = client
    }
}
