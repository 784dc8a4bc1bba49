import CMosquittoIO
import Glibc
import Testing

@testable import Mosquitto

/// The reader and writer behind libmosquitto's hooked `read`, `write` and `close`
/// (CMosquittoIO), on a socketpair: what libmosquitto would see, call by call.
@Suite("Mosquitto: batched reads and writes")
struct BatchedIOTests {
    /// A non-blocking stream socketpair, closed by `body`'s end.
    private func withPair(_ body: (Int32, Int32) throws -> Void) throws {
        var fds: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        defer {
            if fds[0] >= 0 { close(fds[0]) }
            if fds[1] >= 0 { close(fds[1]) }
        }
        try body(fds[0], fds[1])
    }

    private func send(_ fd: Int32, _ bytes: [UInt8]) {
        let wrote = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        #expect(wrote == bytes.count)
    }

    private func receiveAll(_ fd: Int32) -> [UInt8] {
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let got = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if got <= 0 { return out }
            out += chunk[0..<got]
        }
    }

    @Test("libmosquitto's read, write and close are hooked on this platform (libmosquitto 2.0), unless the internals are off")
    func installed() {
        guard !MosquittoLibrary.internalsDisabled else {
            #expect(!MosquittoLibrary.batchesIO, "off: libmosquitto's I/O is its own")
            return
        }
        #expect(MosquittoLibrary.batchesIO)
        #expect(cmosq_io_install(), "idempotent")
    }

    @Test("an armed reader serves libmosquitto's small reads from one read(2), byte for byte")
    func reader() throws {
        try withPair { near, far in
            let stream = (0..<3_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            send(far, stream)
            let reader = try #require(cmosq_reader_create(64 * 1024))
            defer { cmosq_reader_destroy(reader) }
            #expect(cmosq_reader_arm(reader, near))
            // What packet__read asks for: one byte, one byte, then the rest, repeated.
            var got: [UInt8] = []
            var sizes = [1, 1, 30].makeIterator()
            var buffer = [UInt8](repeating: 0, count: 64)
            while got.count < stream.count {
                let size = sizes.next() ?? { sizes = [1, 1, 30].makeIterator(); return sizes.next()! }()
                let count = buffer.withUnsafeMutableBytes { cmosq_io_read(near, $0.baseAddress, size) }
                try #require(count > 0)
                got += buffer[0..<count]
            }
            #expect(got == stream)
            #expect(reader.pointee.fills == 1)
            // Empty buffer, empty socket: the would-block of the socket itself.
            let none = buffer.withUnsafeMutableBytes { cmosq_io_read(near, $0.baseAddress, 1) }
            #expect(none == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
            cmosq_reader_disarm()
        }
    }

    @Test("reads of a descriptor the reader is not armed for, or with no reader armed, go straight to read(2)")
    func readerPassesThrough() throws {
        try withPair { near, far in
            send(far, [1, 2, 3, 4])
            var buffer = [UInt8](repeating: 0, count: 8)
            // Not armed: one byte taken, three left in the socket.
            #expect(buffer.withUnsafeMutableBytes { cmosq_io_read(near, $0.baseAddress, 1) } == 1)
            let reader = try #require(cmosq_reader_create(1024))
            defer { cmosq_reader_destroy(reader) }
            #expect(cmosq_reader_arm(reader, far))
            #expect(buffer.withUnsafeMutableBytes { cmosq_io_read(near, $0.baseAddress, 1) } == 1)
            #expect(buffer[0] == 2)
            #expect(reader.pointee.fills == 0)
            cmosq_reader_disarm()
            #expect(receiveAll(near) == [3, 4])
        }
    }

    @Test("a reader holding bytes of one socket refuses to be armed for another until they are taken or discarded")
    func readerKeepsItsSocket() throws {
        try withPair { near, far in
            send(far, [9, 9, 9, 9])
            let reader = try #require(cmosq_reader_create(1024))
            defer { cmosq_reader_destroy(reader) }
            #expect(cmosq_reader_arm(reader, near))
            var byte: UInt8 = 0
            #expect(cmosq_io_read(near, &byte, 1) == 1)
            cmosq_reader_disarm()
            #expect(cmosq_reader_pending(reader) == 3)
            #expect(!cmosq_reader_arm(reader, far))
            cmosq_reader_discard(reader)
            #expect(cmosq_reader_arm(reader, far))
            cmosq_reader_disarm()
        }
    }

    @Test("an armed writer gathers libmosquitto's writes; one flush sends them in order")
    func writer() throws {
        try withPair { near, far in
            let writer = try #require(cmosq_writer_create(64 * 1024))
            defer { cmosq_writer_destroy(writer) }
            #expect(cmosq_writer_arm(writer, near))
            var expected: [UInt8] = []
            for index in 0..<200 {
                let packet: [UInt8] = [0x40, 2, UInt8(index >> 8), UInt8(index & 0xFF)]
                expected += packet
                #expect(packet.withUnsafeBytes { cmosq_io_write(near, $0.baseAddress, $0.count) } == 4)
            }
            cmosq_writer_disarm()
            #expect(receiveAll(far).isEmpty, "nothing leaves before the flush")
            #expect(cmosq_writer_flush(writer) == 0)
            #expect(writer.pointee.flushes == 1)
            #expect(receiveAll(far) == expected)
        }
    }

    @Test("a full socket: the writer keeps what it could not send, and refuses more with EAGAIN")
    func writerBackpressure() throws {
        try withPair { near, far in
            var size: Int32 = 4096
            setsockopt(near, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            let writer = try #require(cmosq_writer_create(16 * 1024))
            defer { cmosq_writer_destroy(writer) }
            #expect(cmosq_writer_arm(writer, near))
            let packet = [UInt8](repeating: 0xAB, count: 1000)
            var accepted = 0
            var refused = false
            for _ in 0..<400 {
                let wrote = packet.withUnsafeBytes { cmosq_io_write(near, $0.baseAddress, $0.count) }
                if wrote < 0 {
                    #expect(errno == EAGAIN)
                    refused = true
                    break
                }
                accepted += wrote
            }
            cmosq_writer_disarm()
            #expect(refused, "a socket with a 4 KiB buffer cannot take 400 kB")
            let held = cmosq_writer_flush(writer)
            #expect(held > 0)
            // What the writer holds plus what reached the socket is everything it accepted.
            let arrived = receiveAll(far)
            #expect(arrived.count + held == accepted)
            #expect(cmosq_writer_flush(writer) >= 0)
            let rest = receiveAll(far)
            #expect(arrived.count + rest.count + Int(cmosq_writer_flush(writer)) == accepted)
        }
    }

    @Test("closing a socket the writer holds bytes for sends them first (libmosquitto closes right after DISCONNECT)")
    func closeFlushes() throws {
        var fds: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        defer { close(fds[1]) }
        let writer = try #require(cmosq_writer_create(1024))
        defer { cmosq_writer_destroy(writer) }
        #expect(cmosq_writer_arm(writer, fds[0]))
        let disconnect: [UInt8] = [0xE0, 0]
        #expect(disconnect.withUnsafeBytes { cmosq_io_write(fds[0], $0.baseAddress, 2) } == 2)
        #expect(cmosq_io_close(fds[0]) == 0)
        cmosq_writer_disarm()
        #expect(writer.pointee.length == 0)
        #expect(receiveAll(fds[1]) == disconnect)
        var byte: UInt8 = 0
        #expect(read(fds[1], &byte, 1) == 0, "then the end of the stream")
    }
}
