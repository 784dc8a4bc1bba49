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
