import ChildProcesses
import Mosquitto
import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// Marks the sockets SwiftNIO opens for the gateway close-on-exec.
///
/// SwiftNIO creates its sockets and accepts connections without `SOCK_CLOEXEC`
/// (`accept4(..., SOCK_NONBLOCK)` in NIOPosix's `ServerSocket.accept`), and has no public
/// way to reach a channel's descriptor. Its channels name the descriptor in their
/// description (`SocketChannel { BaseSocket { fd=N }, ... }`), so the descriptor is read
/// from there and used only if the kernel confirms it is the channel's socket: the same
/// local address, and for a connection the same peer. Anything else (a future NIO that
/// describes channels otherwise) leaves the socket as it is, which is safe: the gateway
/// spawns children only through ``ChildProcess``, which closes every inherited descriptor
/// in the child anyway.
///
/// Reading another library's private text is a private part like libmosquitto's: it is under
/// the same switch (`broker.libmosquitto_internals`, `MOSQUITTO_SWIFT_INTERNALS`), named
/// ``partName`` in the `libmosquitto internals` log line and the `imgw_libmosquitto_internal`
/// metric, and every call of ``mark(_:)`` honours it.
enum CloseOnExec {
    /// Its name beside libmosquitto's parts (``MosquittoLibrary/Internal``).
    static let partName = "close_on_exec"

    /// Whether sockets are marked: unless the internals were turned off.
    static var inUse: Bool { !MosquittoLibrary.internalsDisabled }

    /// Marks `channel`'s socket close-on-exec (on the channel's event loop, while it is
    /// open). Returns false when the internals are off, or its descriptor could not be
    /// found or confirmed.
    @discardableResult
    static func mark(_ channel: any Channel) -> Bool {
        guard inUse, let fd = descriptor(in: String(describing: channel)), let local = channel.localAddress,
              address(of: fd, peer: false) == local
        else { return false }
        if let remote = channel.remoteAddress, address(of: fd, peer: true) != remote { return false }
        let flags = fcntl(fd, F_GETFD)
        guard flags >= 0 else { return false }
        return flags & FD_CLOEXEC != 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) == 0
    }

    /// The number after `fd=` in a NIO channel's description.
    static func descriptor(in description: String) -> Int32? {
        guard let start = description.range(of: "fd=")?.upperBound else { return nil }
        let digits = description[start...].prefix { $0.isASCII && $0.isNumber }
        guard let fd = Int32(digits), fd > 2 else { return nil }
        return fd
    }

    /// The socket's own (or its peer's) IPv4/IPv6 address, as NIO spells it.
    private static func address(of fd: Int32, peer: Bool) -> SocketAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let rc = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                peer ? getpeername(fd, $0, &length) : getsockname(fd, $0, &length)
            }
        }
        guard rc == 0 else { return nil }
        switch Int32(storage.ss_family) {
        case AF_INET:
            return withUnsafeBytes(of: storage) { SocketAddress($0.load(as: sockaddr_in.self)) }
        case AF_INET6:
            return withUnsafeBytes(of: storage) { SocketAddress($0.load(as: sockaddr_in6.self)) }
        default:
            return nil
        }
    }
}
