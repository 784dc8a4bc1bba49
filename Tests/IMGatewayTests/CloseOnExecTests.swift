import NIOCore
import NIOPosix
import Testing

@testable import IMGateway

#if canImport(Glibc)
import Glibc
#endif

@Suite("Close-on-exec for SwiftNIO's sockets")
struct CloseOnExecTests {
    @Test("the descriptor is read from a NIO channel's description", arguments: [
        ("SocketChannel { BaseSocket { fd=17 }, active = true, localAddress = nil, remoteAddress = nil }", Int32(17)),
        ("ServerSocketChannel { BaseSocket { fd=1234 }, active = true }", 1234),
        ("SocketChannel { something else }", nil),
        ("SocketChannel { BaseSocket { fd=2 } }", nil),  // never stdin/stdout/stderr
        ("fd=", nil),
    ] as [(String, Int32?)])
    func parse(_ description: String, _ expected: Int32?) {
        #expect(CloseOnExec.descriptor(in: description) == expected)
    }

    @Test("a listening socket and an accepted connection end up close-on-exec")
    func marksListenerAndAccepted() async throws {
        guard CloseOnExec.inUse else {
            // MOSQUITTO_SWIFT_INTERNALS=off: reading NIO's description is off with the rest.
            let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).get()
            #expect(try await server.eventLoop.submit { CloseOnExec.mark(server) }.get() == false)
            let fd = try #require(CloseOnExec.descriptor(in: String(describing: server)))
            #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC == 0, "left as NIO made it")
            try await server.close()
            return
        }
        let accepted = AsyncStream.makeStream(of: Int32?.self)
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    let marked = CloseOnExec.mark(child)
                    accepted.continuation.yield(marked ? CloseOnExec.descriptor(in: String(describing: child)) : nil)
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        #expect(try await server.eventLoop.submit { CloseOnExec.mark(server) }.get())
        let listener = try #require(CloseOnExec.descriptor(in: String(describing: server)))
        #expect(fcntl(listener, F_GETFD) & FD_CLOEXEC != 0)

        let client = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: server.localAddress!.port!).get()
        var iterator = accepted.stream.makeAsyncIterator()
        let fd = try #require(await iterator.next() ?? nil, "the accepted socket was marked")
        #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC != 0)

        // Why this exists: a socket NIO opened and nobody marked.
        let clientFD = try #require(CloseOnExec.descriptor(in: String(describing: client)))
        #expect(fcntl(clientFD, F_GETFD) & FD_CLOEXEC == 0, "NIO does not set it on its own")
        try await client.close()
        try await server.close()
    }
}
