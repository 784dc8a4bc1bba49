import Foundation
import IMWire
import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A plain blocking TCP socket for sending bytes no well-behaved encoder would produce.
package final class RawSocket: @unchecked Sendable {
    // @unchecked Sendable: `fd` is immutable, `closed` atomic; reads happen on one thread at a
    // time.
    private let fd: Int32
    /// ``close()`` or ``reset()`` was called (the descriptor is closed once).
    private let closed = Atomic<Bool>(false)

    /// Connects to 127.0.0.1:`port`, from `source` (another loopback address, as a second
    /// host would) if given; a read gives up after `receiveTimeout` seconds without a byte.
    package init(port: Int, from source: String? = nil, receiveTimeout: Int = 10) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestError("socket failed: errno \(errno)") }
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0 else {
                Glibc.close(fd)
                throw TestError("bind to \(source) failed: errno \(errno)")
            }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else {
            Glibc.close(fd)
            throw TestError("connect to \(port) failed: errno \(errno)")
        }
        var timeout = timeval(tv_sec: receiveTimeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close() }

    /// Closes the connection (a FIN after what was sent).
    package func close() {
        guard !closed.exchange(true, ordering: .relaxed) else { return }
        Glibc.close(fd)
    }

    /// Resets the connection (SO_LINGER 0, then close: an RST, what was not read is dropped), as
    /// when a phone loses its network or an app is killed.
    package func reset() {
        guard !closed.exchange(true, ordering: .relaxed) else { return }
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        Glibc.close(fd)
    }

    /// Sends `bytes`; false once the peer has closed (or reset) the connection.
    @discardableResult
    package func send(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count
    }

    /// Everything the peer sends until it closes (or 10 s pass), decoded as frames. The
    /// blocking reads run on a thread of their own, not on Swift's cooperative pool (which
    /// the gateway under test needs).
    package func readFramesUntilClose() async throws -> (frames: [IMFrame], closed: Bool) {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(with: Result { try self.blockingRead() })
            }
        }
    }

    /// Frames as they arrive until `done` says so (or the peer closes, or 10 s pass without
    /// a byte); the frames read so far, the last one the one `done` accepted.
    package func readFrames(until done: @escaping @Sendable (IMFrame) -> Bool) async throws -> [IMFrame] {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(with: Result { try self.blockingRead(until: done) })
            }
        }
    }

    private func blockingRead(until done: (IMFrame) -> Bool) throws -> [IMFrame] {
        var buffer = ByteBuffer()
        var chunk = [UInt8](repeating: 0, count: 65536)
        var decoder = IMFrameDecoder(maxBodyLength: 16 * 1024 * 1024)
        var frames: [IMFrame] = []
        while true {
            let count = recv(fd, &chunk, chunk.count, 0)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { throw TestError("connection closed or silent after \(frames.count) frames") }
            buffer.writeBytes(chunk[0..<count])
            while let frame = try decoder.decode(buffer: &buffer) {
                frames.append(frame)
                if done(frame) { return frames }
            }
        }
    }

    /// Encodes and sends `message` as a frame with `sequence`.
    package func send(_ message: IMMessage, sequence: UInt32) throws {
        send(try Self.bytes(of: message, sequence: sequence))
    }

    /// `message` as a frame with `sequence`, encoded.
    package static func bytes(of message: IMMessage, sequence: UInt32) throws -> [UInt8] {
        var bytes = ByteBuffer()
        try IMFrameEncoder().encode(data: message.frame(sequence: sequence, timestamp: 0, sessionID: 1), out: &bytes)
        return Array(bytes.readableBytesView)
    }

    private func blockingRead() throws -> (frames: [IMFrame], closed: Bool) {
        var buffer = ByteBuffer()
        var chunk = [UInt8](repeating: 0, count: 4096)
        var closed = false
        while true {
            let count = recv(fd, &chunk, chunk.count, 0)
            if count == 0 { closed = true; break }
            if count < 0 {
                if errno == EINTR { continue }
                // A reset is a close too; only the receive timeout means "still open".
                closed = errno != EAGAIN && errno != EWOULDBLOCK
                break
            }
            buffer.writeBytes(chunk[0..<count])
        }
        var decoder = IMFrameDecoder()
        var frames: [IMFrame] = []
        while let frame = try decoder.decode(buffer: &buffer) { frames.append(frame) }
        return (frames, closed)
    }
}

/// The ERROR notices among `frames`, in order.
package func errorNotices(_ frames: [IMFrame]) -> [ErrorNotice] {
    frames.compactMap { frame in
        if case .error(let notice)? = try? IMMessage(frame: frame) { return notice }
        return nil
    }
}
