import CMosquitto
import CMosquittoIO

/// Process-wide libmosquitto facts.
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

    /// Whether the DUP flag of received messages can be read: only through libmosquitto
    /// 2.0's private message layout (see `cmosq_message_dup` in the CMosquitto shim).
    static let canReadDupFlag: Bool = version.major == 2 && version.minor == 0

    /// Whether a handle's internal socketpair can be taken away from it: only through
    /// libmosquitto 2.0's private layout (see `cmosq_detach_socketpair`), which is also
    /// checked against the descriptors found for each handle.
    static let canDetachSocketPair: Bool = version.major == 2 && version.minor == 0

    /// Whether libmosquitto's socket reads and writes go through ``MosquittoEventLoop``'s
    /// batched reader and writer (`cmosq_io_install`: the `read`, `write` and `close` slots
    /// of libmosquitto's own global offset table; see the CMosquittoIO header).
    public static let batchesIO: Bool = cmosq_io_install()
}
