import CMosquitto
import CMosquittoIO
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Process-wide libmosquitto facts, and the one place that decides which of libmosquitto's
/// private parts this library uses.
///
/// libmosquitto 2.0's public API leaves out things a gateway needs (the DUP flag of a
/// message, an asynchronous connect with CONNECT properties, batched socket I/O, a handle
/// without its wake-up socketpair). This library reaches them through the library's
/// private layouts and behaviour, each an ``Internal``. Each is used only when the headers
/// compiled against are libmosquitto 2.0.x (`LIBMOSQUITTO_VERSION_NUMBER`), the linked
/// library is 2.0.x too, its own check passes at run time, and nobody turned them off:
/// the environment variable ``environmentVariable`` set to `off` (for any program using
/// this library), or ``disableInternals()`` called before the first client. Off, every one
/// has a fallback through the public API alone (see each case).
public enum MosquittoLibrary {
    /// `mosquitto_lib_init` runs once, before the first client is created.
    static let initialized: Bool = {
        mosquitto_lib_init() == Int32(MOSQ_ERR_SUCCESS.rawValue)
    }()

    /// The linked libmosquitto version (major, minor, revision).
    public static let version: (major: Int, minor: Int, revision: Int) = {
        var major: Int32 = 0, minor: Int32 = 0, revision: Int32 = 0
        mosquitto_lib_version(&major, &minor, &revision)
        return (Int(major), Int(minor), Int(revision))
    }()

    /// The `LIBMOSQUITTO_VERSION_NUMBER` of the headers this library was compiled against.
    public static let compiledVersion = Int(cmosq_compiled_version())

    /// A private part of libmosquitto this library can use.
    public enum Internal: String, CaseIterable, Sendable, Comparable {
        /// Socket reads and writes batched by ``MosquittoEventLoop`` (`cmosq_io_install`:
        /// the `read`, `write` and `close` slots of libmosquitto's own global offset table,
        /// Linux ELF on x86_64 and aarch64 only). Off: one system call per packet, as
        /// libmosquitto makes them.
        case batchedIO = "batched_io"
        /// The DUP flag of a received message, from 2.0's private message layout
        /// (`cmosq_message_dup`). Off: every message reads as a first delivery (a device
        /// still de-duplicates by id, PROTOCOL.md 10).
        case dupFlag = "dup_flag"
        /// A handle's wake-up socketpair taken from its private head (`cmosq_detach_socketpair`).
        /// Off: the pair is found by its descriptors and drained by the loop.
        case socketPairDetach = "socketpair_detach"
        /// The receive maximum's local limit lifted after CONNECT is queued (2.0's order of
        /// `send__connect` and `message__reconnect_reset`). Off: the limit stays, and a broker
        /// that overruns it (mosquitto's upstream #2301) ends a QoS 2 session with a backlog.
        case receiveMaximumOverrun = "receive_maximum_overrun"
        /// CONNECT properties (the session expiry) stored by `mosquitto_connect_bind_v5` with
        /// an invalid port, then sent by the asynchronous connect (2.0's lib/connect.c order).
        /// Off: a blocking `mosquitto_connect_bind_v5` on the connector thread.
        case asyncConnectProperties = "async_connect_properties"

        public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    /// Set to `off` (or `0`, `false`, `no`) to make this library use none of libmosquitto's
    /// private parts.
    public static let environmentVariable = "MOSQUITTO_SWIFT_INTERNALS"

    private static let choice = Mutex<(disabled: Bool, decided: Bool)>((false, false))

    /// Turns every ``Internal`` off for this process. Only before ``internals`` is first read
    /// (before the first client is created); returns false, changing nothing, after.
    @discardableResult
    public static func disableInternals() -> Bool {
        choice.withLock { choice in
            guard !choice.decided else { return choice.disabled }
            choice.disabled = true
            return true
        }
    }

    /// Whether the internals were turned off (by the environment or ``disableInternals()``).
    public static var internalsDisabled: Bool {
        _ = internals
        return choice.withLock { $0.disabled }
    }

    /// The private parts in use, decided once, at first use.
    public static let internals: Set<Internal> = {
        let disabled = choice.withLock { choice in
            choice.decided = true
            if let value = getenv(environmentVariable).map({ String(cString: $0).lowercased() }),
               ["off", "0", "false", "no"].contains(value) {
                choice.disabled = true
            }
            return choice.disabled
        }
        guard !disabled, cmosq_private_layouts_compiled(), version.major == 2, version.minor == 0 else { return [] }
        var internals: Set<Internal> = [.dupFlag, .socketPairDetach, .receiveMaximumOverrun, .asyncConnectProperties]
        if cmosq_io_install() { internals.insert(.batchedIO) }
        return internals
    }()

    /// Whether the DUP flag of received messages can be read.
    static var canReadDupFlag: Bool { internals.contains(.dupFlag) }

    /// Whether a handle's internal socketpair can be taken away from it (also checked
    /// against the descriptors found for each handle).
    static var canDetachSocketPair: Bool { internals.contains(.socketPairDetach) }

    /// Whether libmosquitto's socket reads and writes go through ``MosquittoEventLoop``'s
    /// batched reader and writer.
    public static var batchesIO: Bool { internals.contains(.batchedIO) }
}

// MARK: - Every use of libmosquitto's private parts

/// What each ``MosquittoLibrary/Internal`` does, and its fallback when it is off: the only
/// code of this library that reaches into libmosquitto's private layouts or behaviour (the
/// C side is `CMosquittoIO`). The rest of the library calls these.
extension MosquittoLibrary {
    // MARK: dup_flag

    /// The DUP flag of a received message (``Internal/dupFlag``); off: false, a first delivery.
    @inline(__always)
    static func dupFlag(of message: UnsafePointer<mosquitto_message>) -> Bool {
        canReadDupFlag ? cmosq_message_dup(message) : false
    }

    // MARK: socketpair_detach

    /// The wake-up socketpair a new handle's private head names (``Internal/socketPairDetach``);
    /// nil when off, or when the head does not hold two descriptors.
    static func headSocketPair(of handle: OpaquePointer) -> (read: Int32, write: Int32)? {
        guard canDetachSocketPair else { return nil }
        var first: Int32 = -1
        var second: Int32 = -1
        guard cmosq_head_socketpair(handle, &first, &second) else { return nil }
        return (first, second)
    }

    /// Takes `pair` away from the handle's head, when it holds exactly this pair: libmosquitto
    /// 2.0 checks the pair against INVALID_SOCKET before each use, so it then simply skips the
    /// wake-up byte. False when off (the loop drains the pair instead).
    static func detachSocketPair(_ handle: OpaquePointer, _ pair: (read: Int32, write: Int32)) -> Bool {
        canDetachSocketPair && cmosq_detach_socketpair(handle, pair.read, pair.write)
    }

    // MARK: receive_maximum_overrun

    /// What CONNECT advertises for a client that set `requested` (nil: none) and whose
    /// value is `configured`: unless libmosquitto can absorb a broker's overrun
    /// (``Internal/receiveMaximumOverrun``), a client that set none advertises 65,535.
    static func advertisedReceiveMaximum(requested: UInt16?, configured: UInt16) -> UInt16 {
        if requested == nil && !internals.contains(.receiveMaximumOverrun) { return .max }
        return configured
    }

    /// The highest QoS a subscription asks for: QoS 1 when a receive maximum the application
    /// set is enforced by libmosquitto as is (``Internal/receiveMaximumOverrun`` off), because a
    /// broker that overruns it at QoS 2 (mosquitto 2.0.11) ends the connection, and the
    /// session's messages then come again as duplicates at every reconnect; QoS 1 never runs
    /// out of libmosquitto's quota (it comes back as the PUBACK is queued).
    static func subscriptionQoSLimit(requested: UInt16?) -> QoS {
        requested != nil && !internals.contains(.receiveMaximumOverrun) ? .atLeastOnce : .exactlyOnce
    }

    /// Lifts the handle's local receive limit after CONNECT was queued with the configured
    /// value (``Internal/receiveMaximumOverrun``; off: nothing).
    ///
    /// mosquitto 2.0.11 (the broker of Debian bookworm) exceeds a client's receive
    /// maximum whenever messages are queued for it: on each PUBACK/PUBCOMP,
    /// `db__message_delete_outgoing` (src/database.c) counts only the in-flight messages
    /// ahead of the acknowledged one and moves up to receive-maximum queued messages into
    /// flight on top of those still unacknowledged (upstream #2301). libmosquitto 2.0
    /// answers a PUBLISH beyond its receive quota with MOSQ_ERR_PROTOCOL and closes the
    /// socket without a DISCONNECT (lib/handle_publish.c). QoS 1 never runs out (the quota
    /// comes back as the PUBACK is queued, inside the same read); QoS 2 does, because the
    /// quota comes back only with PUBREL: a QoS 2 subscriber with a backlog at the broker
    /// was disconnected.
    ///
    /// `mosquitto_connect_bind_async` has already queued CONNECT with the configured value
    /// when it returns MOSQ_ERR_SUCCESS (lib/connect.c `mosquitto__reconnect` calls
    /// `send__connect`), and the quota is reset from that field only when CONNACK is handled
    /// (`message__reconnect_reset`, in `mosquitto_loop_read` on the loop thread, which keeps
    /// off the handle until this returns). Raising the field now keeps the advertised value
    /// and lifts the local limit to 65,535 (every packet id), so the broker's normal flow
    /// control still applies and its overrun is absorbed.
    static func liftReceiveMaximum(_ handle: OpaquePointer) {
        guard internals.contains(.receiveMaximumOverrun) else { return }
        // 0 means UINT16_MAX (lib/options.c).
        _ = mosquitto_int_option(handle, MOSQ_OPT_RECEIVE_MAXIMUM, 0)
    }

    // MARK: async_connect_properties

    /// Connects without blocking on the broker with CONNECT properties `list` (freed here):
    /// libmosquitto 2.0 has no asynchronous connect that takes them
    /// (``Internal/asyncConnectProperties``). `mosquitto_connect_bind_v5` copies them into the
    /// handle before it validates the port (lib/connect.c), and `mosquitto_connect_bind_async`
    /// then sends the stored ones; an invalid port (-1) makes the first call stop right there.
    /// Off: a blocking `mosquitto_connect_bind_v5` (on the connector's thread; libmosquitto
    /// makes the socket non-blocking once connected).
    static func connect(
        _ handle: OpaquePointer, host: String, port: Int32, keepalive: Int32, properties list: inout OpaquePointer?
    ) -> Int32 {
        defer { mosquitto_property_free_all(&list) }
        guard internals.contains(.asyncConnectProperties) else {
            return mosquitto_connect_bind_v5(handle, host, port, keepalive, nil, list)
        }
        let stored = mosquitto_connect_bind_v5(handle, host, -1, keepalive, nil, list)
        if stored != Int32(MOSQ_ERR_INVAL.rawValue) { return stored == 0 ? Int32(MOSQ_ERR_UNKNOWN.rawValue) : stored }
        return mosquitto_connect_bind_async(handle, host, port, keepalive, nil)
    }

    // MARK: batched_io

    /// A batched reader for ``MosquittoEventLoop`` (``Internal/batchedIO``); nil when off.
    static func makeBatchedReader(capacity: Int) -> UnsafeMutablePointer<cmosq_reader>? {
        batchesIO ? cmosq_reader_create(capacity) : nil
    }

    /// A batched writer for ``MosquittoEventLoop`` (``Internal/batchedIO``); nil when off.
    static func makeBatchedWriter(capacity: Int) -> UnsafeMutablePointer<cmosq_writer>? {
        batchesIO ? cmosq_writer_create(capacity) : nil
    }

    /// Frees what ``makeBatchedReader(capacity:)`` and ``makeBatchedWriter(capacity:)`` made.
    static func destroyBatched(_ reader: UnsafeMutablePointer<cmosq_reader>?, _ writer: UnsafeMutablePointer<cmosq_writer>?) {
        cmosq_reader_destroy(reader)
        cmosq_writer_destroy(writer)
    }

    /// `readPacket` (one `mosquitto_loop_read`) while `reader` holds bytes read ahead from
    /// `fd` by one read(2) and `sameSocket` holds; returns its last code, or nil when the
    /// reader could not be armed (read the public way then).
    @inline(__always)
    static func readBatched(
        _ reader: UnsafeMutablePointer<cmosq_reader>?, fd: Int32, readPacket: () -> Int32, sameSocket: () -> Bool
    ) -> Int32? {
        guard let reader, cmosq_reader_arm(reader, fd) else { return nil }
        var rc: Int32
        repeat {
            // libmosquitto stops reading packets when errno is EAGAIN after one, even when
            // that errno is left over from an earlier call.
            errno = 0
            rc = readPacket()
        } while rc == 0 && cmosq_reader_pending(reader) > 0 && sameSocket()
        cmosq_reader_disarm()
        if cmosq_reader_pending(reader) > 0 {
            // The socket failed or was closed with bytes still read ahead.
            cmosq_reader_discard(reader)
        }
        return rc
    }

    /// `writePackets` (one `mosquitto_loop_write`) gathered by `writer` into one write(2) to
    /// `fd`; what the socket does not take is handed to `unsent`. Returns its code, or nil
    /// when the writer could not be armed (write the public way then).
    @inline(__always)
    static func writeBatched(
        _ writer: UnsafeMutablePointer<cmosq_writer>?, fd: Int32, writePackets: () -> Int32, sameSocket: () -> Bool,
        unsent: (UnsafeBufferPointer<UInt8>) -> Void
    ) -> Int32? {
        guard let writer, cmosq_writer_arm(writer, fd) else { return nil }
        errno = 0
        let rc = writePackets()
        cmosq_writer_disarm()
        if sameSocket() {
            let held = cmosq_writer_flush(writer)
            if held > 0, let data = writer.pointee.data { unsent(UnsafeBufferPointer(start: data, count: held)) }
            // A failed socket (held < 0) is reported by the next read.
        }
        cmosq_writer_discard(writer)
        return rc
    }
}
