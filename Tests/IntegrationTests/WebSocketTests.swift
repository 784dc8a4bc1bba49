import Foundation
import IMClient
import IMGateway
import IMWire
import IMTestSupport
import NIOCore
import NIOPosix
import NIOSSL
import NIOWebSocket
import Synchronization
import Testing

/// Browser devices: TLV over WebSocket (`listen.websocket`), through IMClient's WebSocket
/// transport and a raw NIO WebSocket client, beside TCP devices, on a real mosquitto.
@Suite("WebSocket transport", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct WebSocketTests {
    static let apiKey = "websocket-test-key-0123456789abcdef0123"

    static func gateway(_ configure: (inout GatewayConfiguration) -> Void = { _ in }) async throws -> TestGateway {
        try await TestGateway.start { configuration in
            configuration.listen.websocket = .init(enabled: true, port: 0)
            configuration.api.port = 0
            configuration.api.keys = [.init(name: "test", key: apiKey)]
            configure(&configuration)
        }
    }

    @Test("a WebSocket device and a TCP device chat both ways with receipts; metrics and /v1/stats count each transport; the console loads without a key")
    func chatBesideTCP() async throws {
        let gateway = try await Self.gateway()
        let alice = try await gateway.webSocketClient("alice", device: "browser")
        let bob = try await gateway.client("bob", device: "phone")
        let aliceEvents = Collector(alice.events)
        let bobEvents = Collector(bob.events)

        let sent = try await alice.send(to: "bob", text: "hi from the browser", messageID: "ws-1")
        let received = try await nextMessage(bobEvents)
        #expect(received.from == "alice")
        #expect(received.text == "hi from the browser")
        #expect(received.serverTime == sent.serverTime)
        try await bob.send(to: "alice", text: "hi from the phone", messageID: "tcp-1")
        let reply = try await nextMessage(aliceEvents)
        #expect(reply.from == "bob")
        #expect(reply.text == "hi from the phone")
        try await alice.sendReadReceipt(to: "bob", messageID: "tcp-1")
        while true {
            if case .receipt(let receipt) = try await bobEvents.next(within: 10, "alice's read receipt"), receipt.kind == .read {
                #expect(receipt.from == "alice")
                #expect(receipt.messageID == "tcp-1")
                break
            }
        }

        let metricsPort = try #require(await gateway.server.metrics?.localAddress().port)
        let lines = [
            #"imgw_connections{transport="websocket"} 1"#, #"imgw_connections{transport="tcp"} 1"#,
            #"imgw_logged_in{transport="websocket"} 1"#, #"imgw_logins_total{transport="websocket"} 1"#,
            #"imgw_chat_messages_in_total{transport="websocket"} 1"#, #"imgw_chat_messages_in_total{transport="tcp"} 1"#,
        ]
        // By line: the exposition's order follows a dictionary's, and the output as read has no
        // final newline, so whichever line comes last has none either.
        func missing(_ metrics: String) -> [String] {
            let present = Set(metrics.split(separator: "\n").map { String($0) })
            return lines.filter { !present.contains($0) && !present.contains($0 + ".0") }
        }
        // Polling the counters (up to 5 s): they are read at each scrape.
        var metrics = ""
        for _ in 0..<100 {
            metrics = try await run("/usr/bin/curl", ["-sS", "http://127.0.0.1:\(metricsPort)/metrics"])
            if missing(metrics).isEmpty { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(missing(metrics).isEmpty, "in /metrics: \(metrics)")

        let api = try #require(await gateway.server.api?.localAddress().port)
        let stats = try await run("/usr/bin/curl", ["-sS", "-H", "Authorization: Bearer \(Self.apiKey)", "http://127.0.0.1:\(api)/v1/stats"])
        let json = try #require(try JSONSerialization.jsonObject(with: Data(stats.utf8)) as? [String: Any])
        let connections = json["connections"] as? [String: Int]
        let logins = json["logins_total"] as? [String: Int]
        let expected: [String: Int] = ["tcp": 1, "websocket": 1]
        #expect(connections == expected, "\(stats)")
        #expect(logins == expected)
        let chats = json["chats_in_total"] as? Int
        #expect(chats == 2)
        let p99: Double = json["chat_p99_ms"] as? Double ?? -1
        #expect(p99 > 0, "a p99 after two chats: \(stats)")
        #expect(p99 < 10_000)
        let broker = json["broker"] as? [String: Any]
        let brokerConnected = broker?["connected"] as? Bool
        #expect(brokerConnected == true)
        let archive = json["archive"] as? [String: Any]
        let archiveAvailable = archive?["available"] as? Bool
        #expect(archiveAvailable == true)
        let refused = try await run("/usr/bin/curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:\(api)/v1/stats"])
        #expect(refused == "401")
        let console = try await run("/usr/bin/curl", ["-sS", "-w", "\n%{http_code} %{content_type}", "http://127.0.0.1:\(api)/console"])
        #expect(console.hasSuffix("200 text/html; charset=utf-8"))
        #expect(console.contains("plot-connections"))
        let ws = try #require(await gateway.server.websocket?.localAddress().port)
        let library = try await run("/usr/bin/curl", ["-sS", "-w", "\n%{http_code} %{content_type}", "http://127.0.0.1:\(ws)/imclient.js"])
        #expect(library.hasSuffix("200 text/javascript; charset=utf-8"))
        #expect(library.contains("export class IMClient"))
        let noPage = try await run("/usr/bin/curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:\(ws)/dev/token?user=alice"])
        #expect(noPage == "404", "development tokens only in development mode")

        await alice.close()
        await bob.close()
        await gateway.stop()
    }

    @Test("development mode refuses a Host that is not loopback (DNS rebinding): 403 with a JSON body for /dev/token, the page and the upgrade; localhost and 127.0.0.1 still work")
    func developmentRebinding() async throws {
        let gateway = try await Self.gateway { $0.listen.websocket.development = true }
        let ws = try #require(await gateway.server.websocket?.localAddress().port)
        func get(_ path: String, host: String, origin: String? = nil, headers: [String] = []) async throws -> (status: String, body: String) {
            var arguments = ["-sS", "-w", "\n%{http_code}", "-H", "Host: \(host)"]
            if let origin { arguments += ["-H", "Origin: \(origin)"] }
            for header in headers { arguments += ["-H", header] }
            let output = try await run("/usr/bin/curl", arguments + ["http://127.0.0.1:\(ws)\(path)"])
            let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
            return (String(lines.last ?? ""), lines.dropLast().joined(separator: "\n"))
        }
        // The request of the report: a page whose name resolves to 127.0.0.1 asks for a token.
        let rebound = try await get("/dev/token?user=alice", host: "rebind.example:\(ws)", origin: "http://rebind.example:\(ws)")
        #expect(rebound.status == "403")
        let json = try JSONSerialization.jsonObject(with: Data(rebound.body.utf8)) as? [String: Any]
        #expect(json?["error"] as? String == "host_not_allowed", "\(rebound.body)")
        #expect(!rebound.body.contains("token\""), "no token")
        #expect(try await get("/", host: "rebind.example:\(ws)").status == "403", "nor the page")
        let upgrade = try await get("/im", host: "rebind.example:\(ws)", origin: "http://rebind.example:\(ws)", headers: [
            "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Protocol: imgw.tlv.v1",
        ])
        #expect(upgrade.status == "403", "nor the WebSocket upgrade")
        // A developer's browser on the machine.
        for host in ["localhost:\(ws)", "127.0.0.1:\(ws)"] {
            let token = try await get("/dev/token?user=alice", host: host, origin: "http://\(host)")
            #expect(token.status == "200", "\(host): \(token.body)")
            #expect(token.body.contains("\"token\""))
        }
        #expect(try await get("/", host: "localhost:\(ws)").status == "200")
        await gateway.stop()
    }

    @Test("catching up over WebSocket: what a browser missed while closed comes first at its next login, in order, once")
    func catchUp() async throws {
        let gateway = try await Self.gateway()
        let alice = try await gateway.webSocketClient("alice", device: "browser")
        let bob = try await gateway.client("bob", device: "phone")
        let aliceEvents = Collector(alice.events)
        try await bob.send(to: "alice", text: "before", messageID: "b-0")
        #expect(try await nextMessage(aliceEvents).messageID == "b-0")
        let position = await alice.syncPosition
        await alice.close()
        for index in 1...5 { try await bob.send(to: "alice", text: "missed \(index)", messageID: "b-\(index)") }

        let again = try await gateway.webSocketClient("alice", device: "browser", position: position)
        let againEvents = Collector(again.events)
        var ids: [String] = []
        while ids.count < 5 {
            let message = try await nextMessage(againEvents)
            #expect(message.isArchived)
            ids.append(message.messageID)
        }
        #expect(ids == ["b-1", "b-2", "b-3", "b-4", "b-5"])
        try await bob.send(to: "alice", text: "live", messageID: "b-6")
        #expect(try await nextMessage(againEvents).messageID == "b-6", "nothing surfaced twice before it")
        await again.close()
        await bob.close()
        await gateway.stop()
    }

    @Test("limits hold over WebSocket: a chat burst past limits.chat_burst is refused RATE_LIMITED (IMClient sends again after RETRY_AFTER), all arrive")
    func rateLimit() async throws {
        let gateway = try await Self.gateway { configuration in
            configuration.limits.chatRate = 5
            configuration.limits.chatBurst = 2
        }
        let alice = try await gateway.webSocketClient("alice", device: "browser")
        let bob = try await gateway.client("bob", device: "phone")
        let bobEvents = Collector(bob.events)
        for index in 0..<6 { _ = try await alice.post(to: "bob", content: .text("burst \(index)"), messageID: "r-\(index)") }
        var ids: Set<String> = []
        while ids.count < 6 {
            // (Sent again after the gateway's RETRY_AFTER: allow for it.)
            if case .message(let message) = try await bobEvents.next(within: 30, "the burst's messages") { ids.insert(message.messageID) }
        }
        #expect(ids == Set((0..<6).map { "r-\($0)" }))
        let limited = try await gateway.metric("imgw_chat_rate_limited_total")
        #expect(limited >= 1, "the burst of 6 against a bucket of 2 was limited")
        await alice.close()
        await bob.close()
        await gateway.stop()
    }

    @Test("wss: with listen.tls the WebSocket listener serves TLS with the same certificate; IMClient chats through it")
    func tls() async throws {
        let pki = try await TLSTests.PKI.make()
        defer { try? FileManager.default.removeItem(at: pki.directory) }
        let gateway = try await Self.gateway {
            $0.listen.tls = .init(certFile: pki.path("server.crt"), keyFile: pki.path("server.key"))
        }
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file(pki.path("ca.crt"))
        let port = try #require(await gateway.server.websocket?.localAddress().port)
        var configuration = IMClient.Configuration(port: port, token: try await gateway.minter.mint(user: "alice"), deviceID: "browser", tls: tls)
        configuration.webSocketPath = "/im"
        let alice = try await tracked(IMClient.connect(configuration))
        var bobConfiguration = IMClient.Configuration(port: gateway.port, token: try await gateway.minter.mint(user: "bob"), deviceID: "phone", tls: tls)
        bobConfiguration.tlsServerName = "localhost"
        let bob = try await tracked(IMClient.connect(bobConfiguration))
        let bobEvents = Collector(bob.events)
        try await alice.send(to: "bob", text: "over wss", messageID: "wss-1")
        let received = try await nextMessage(bobEvents)
        #expect(received.text == "over wss")
        // Plain ws:// to the TLS listener does not get in.
        var plain = IMClient.Configuration(port: port, token: try await gateway.minter.mint(user: "carol"), deviceID: "browser", reconnect: false)
        plain.webSocketPath = "/im"
        plain.connectTimeout = .seconds(3)
        await #expect(throws: IMClientError.self) { _ = try await IMClient.connect(plain) }
        await alice.close()
        await bob.close()
        await gateway.stop()
    }

    @Test("graceful shutdown: a WebSocket device gets KICK SERVER_SHUTTING_DOWN, then close 1001, and the gateway ends")
    func shutdown() async throws {
        let gateway = try await Self.gateway()
        let port = try #require(await gateway.server.websocket?.localAddress().port)
        let device = try await RawWebSocketDevice.connect(port: port)
        try await device.send(IMMessage.hello(Hello(version: .current, features: [])).frame(sequence: 1, timestamp: 0, sessionID: 1))
        let helloOK = try await device.next()
        #expect(helloOK.header.type == .control)
        try await device.send(IMMessage.login(LoginRequest(token: try await gateway.minter.mint(user: "carol"), deviceID: "browser"))
            .frame(sequence: 2, timestamp: 0, sessionID: 1))
        guard case .loginOK = try IMMessage(frame: try await device.next()) else {
            Issue.record("no LOGIN_OK")
            return
        }
        gateway.server.shutdown()
        var kicked: Kick?
        while kicked == nil {
            if case .kick(let kick) = try IMMessage(frame: try await device.next()) { kicked = kick }
        }
        #expect(kicked?.reason == .serverShuttingDown)
        try await device.closed()
        #expect(device.closeCode == .goingAway)
        await gateway.stop()
    }
}

extension TestGateway {
    /// An IMClient logged in as `user` on `device` through the WebSocket listener.
    func webSocketClient(_ user: String, device: String, position: StreamPosition? = nil) async throws -> IMClient {
        var configuration = IMClient.Configuration(
            port: try #require(await server.websocket?.localAddress().port), token: try await minter.mint(user: user), deviceID: device,
            syncPosition: position)
        configuration.webSocketPath = "/im"
        return try await tracked(IMClient.connect(configuration))
    }
}

/// A WebSocket device without IMClient: frames as they come, and the close code.
final class RawWebSocketDevice: Sendable {
    let channel: NIOAsyncChannel<IMFrame, IMFrame>
    private let iterator: AsyncIteratorBox
    /// The code of the gateway's close frame, once the connection has closed.
    private let box: CodeBox

    // Safe to send: only the test's one task uses it, one `next()` at a time.
    private final class AsyncIteratorBox: @unchecked Sendable {
        var iterator: NIOAsyncChannelInboundStream<IMFrame>.AsyncIterator?
    }

    private init(channel: NIOAsyncChannel<IMFrame, IMFrame>, box: CodeBox) {
        self.channel = channel
        self.box = box
        self.iterator = AsyncIteratorBox()
        self.iterator.iterator = channel.inbound.makeAsyncIterator()
    }

    @Sendable private static func framed(_ channel: any Channel) throws -> NIOAsyncChannel<IMFrame, IMFrame> {
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(IMFrameDecoder()))
        try channel.pipeline.syncOperations.addHandler(MessageToByteHandler(IMFrameEncoder()))
        return try NIOAsyncChannel<IMFrame, IMFrame>(wrappingChannelSynchronously: channel)
    }

    static func connect(port: Int) async throws -> RawWebSocketDevice {
        let box = CodeBox()
        let initializer: @Sendable (any Channel) -> EventLoopFuture<EventLoopFuture<NIOAsyncChannel<IMFrame, IMFrame>>> = { channel in
            channel.eventLoop.makeCompletedFuture {
                try WebSocketTransport.configure(
                    channel, host: "127.0.0.1", port: port, path: "/im", closed: { code in box.code.withLock { $0 = code } }, upgraded: framed)
            }
        }
        let upgrading = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port, channelInitializer: initializer)
        return RawWebSocketDevice(channel: try await upgrading.get(), box: box)
    }

    /// Where the close code lands.
    final class CodeBox: Sendable {
        let code = Mutex<WebSocketErrorCode?>(nil)
    }

    func send(_ frame: IMFrame) async throws {
        try await channel.outbound.write(frame)
    }

    /// The next frame, within 10 s.
    func next() async throws -> IMFrame {
        let box = iterator
        return try await withThrowingTaskGroup(of: IMFrame?.self) { group in
            group.addTask { try await box.iterator?.next() }
            group.addTask {
                try await Task.sleep(for: .seconds(10))
                throw TestError("no frame within 10 s")
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let frame = first else { throw TestError("the connection closed") }
            return frame
        }
    }

    /// Returns once the connection has closed.
    func closed() async throws {
        try await channel.channel.closeFuture.get()
    }

    /// The code of the gateway's close frame, once the connection has closed.
    var closeCode: WebSocketErrorCode? { box.code.withLock { $0 } }
}
