import Foundation
import IMGateway
import IMWire
import Mosquitto
import Testing

#if canImport(Glibc)
import Glibc
import IMTestSupport
#endif

/// Descriptors and the MQTT event loop: epoll watches open file descriptions, not numbers, so a
/// socket closed while another process holds a copy stays registered and keeps reporting
/// (epoll(7)). The loop must never spin on such a registration, and imgw must hand none of
/// its sockets to a child.
@Suite("Descriptors: no leaks into children, no spinning loop", .stopsWhatItStarts, .timeLimit(.minutes(2)))
struct DescriptorHygieneTests {
    /// The loop thread's CPU over this window must stay under 5% of a core.
    static let window: Duration = .seconds(2)
    static let maxShare = 0.05

    @Test("a child holds a copy of a client's socket and the client aborts: the loop thread stays idle")
    func heldCopyThenAbort() async throws {
        let broker = try await TestBroker.start()
        let loop = MosquittoEventLoop(name: "fd-abort-loop")
        let client = makeClient(broker, loop: loop)
        try await client.connect()
        let socket = try #require(ProcessDescriptors.ownSocket(connectedTo: broker.port), "the client's socket")
        let holder = try DescriptorHolder(holding: socket)
        #expect(ProcessDescriptors.socketInodes(of: holder.pid).count == 1, "the child holds the socket")

        await client.abort()
        #expect(await client.state == .disconnected)
        let share = try await loopShare("fd-abort-loop")
        #expect(share < Self.maxShare, "the loop thread used \(Int(share * 100))% of a core after the abort")
        #expect(await loop.statistics().epollRebuilds == 0, "abort takes the socket out of epoll before it is closed")

        holder.stop()
        await client.close()
        loop.shutdown()
        await broker.stop()
    }

    @Test("a child holds a copy of a client's socket and the broker closes the connection: the loop drops the stale registration")
    func heldCopyThenBrokerCloses() async throws {
        let broker = try await TestBroker.start()
        let loop = MosquittoEventLoop(name: "fd-close-loop")
        let id = "held-\(UInt32.random(in: 0...UInt32.max))"
        let first = makeClient(broker, id: id, loop: loop)
        let events = Collector(first.events)
        try await first.connect()
        #expect(try await events.next(within: 10, "connected").isConnected(sessionPresent: false))
        let socket = try #require(ProcessDescriptors.ownSocket(connectedTo: broker.port), "the client's socket")
        let holder = try DescriptorHolder(holding: socket)

        // A second client with the same id: the broker closes the first connection, and
        // libmosquitto closes its socket inside a read, where the loop cannot take it out of
        // epoll first.
        let second = makeClient(broker, id: id)
        try await second.connect()
        guard case .disconnected = try await events.next(within: 10, "the first client's disconnection") else {
            Issue.record("expected a disconnection")
            return
        }
        let share = try await loopShare("fd-close-loop")
        #expect(share < Self.maxShare, "the loop thread used \(Int(share * 100))% of a core after the broker closed")
        #expect(await loop.statistics().epollRebuilds >= 1, "the registration that outlived its descriptor was dropped")

        holder.stop()
        await first.close()
        await second.close()
        loop.shutdown()
        await broker.stop()
    }

    @Test("every socket and pipe of a running imgw is close-on-exec")
    func imgwDescriptorsCloseOnExec() async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let device = try await TestDevice.connect(port: gateway.port)
        try await device.login(token: try await minter.mint(user: "cleo"), device: "phone")
        _ = try await gateway.metric("imgw_connections")  // an accepted metrics connection too

        let pid = gateway.process.pid
        let links = ProcessDescriptors.links(of: pid).filter { $0.fd > 2 }
        let sockets = links.filter { $0.target.hasPrefix("socket:") || $0.target.hasPrefix("pipe:") }
        // The listener, the device, the metrics listener, and per MQTT client its TCP socket
        // (the device's session, the stats and share clients; libmosquitto's socketpairs are
        // detached and closed), and NIO's own.
        #expect(sockets.count >= 6, "\(links)")
        // A descriptor gone by the time its flags are read (nil) was closed meanwhile: curl's
        // metrics connection, whose end the gateway may close between the two reads.
        let leaking = sockets.filter { ProcessDescriptors.isCloseOnExec($0.fd, of: pid) == false }
        if ProcessInfo.processInfo.environment[MosquittoLibrary.environmentVariable] == "off" {
            // Reading SwiftNIO's channel description for the descriptor is a private part too,
            // off with the rest: NIO's sockets stay as NIO made them (children inherit none of
            // them anyway: ChildProcess closes every descriptor above 2 in the child).
            #expect(!leaking.isEmpty, "the switch did not turn close_on_exec off")
        } else {
            #expect(leaking.isEmpty, "not close-on-exec: \(leaking)")
        }

        await device.drop()
        _ = await gateway.stop(within: .seconds(10))
        await broker.stop()
    }

    /// The share of a core the named thread used over ``window``.
    private func loopShare(_ thread: String) async throws -> Double {
        let before = try #require(ProcessDescriptors.threadCPU(named: thread), "thread \(thread)")
        try await Task.sleep(for: Self.window)  // the measurement window, not a wait for an event
        let after = try #require(ProcessDescriptors.threadCPU(named: thread))
        return (after - before) / 2.0
    }
}
