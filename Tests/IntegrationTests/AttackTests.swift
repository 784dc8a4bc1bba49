import Foundation
import IMGateway
import IMWire
import Mosquitto
import NIOCore
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
import IMTestSupport
#endif

/// The attacks an independent run tried against `imgw serve` as `make run` configures it
/// (the embedded broker, every limit at its default), each against a real process of its
/// own. The cases that other suites show in depth are listed in docs/SECURITY.md, "Attacks
/// and their tests"; these are the ones that held before the broker was secured, kept here so
/// that none regresses: tokens, pre-login requests, spoofed senders, topic escapes, location
/// grants, framing, slowloris and a login flood.
@Suite("Attacks on imgw serve with its defaults", .serialized, .stopsWhatItStarts, .timeLimit(.minutes(2)))
struct AttackTests {
    /// One `imgw serve` with its embedded broker, and what the attacks need of it.
    struct Target {
        let setup: EmbeddedGateway.Setup
        let gateway: EmbeddedGateway
        let minter = TokenMinter(secret: IMGWProcess.secret)

        static func start() async throws -> Target {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-attack-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            TestResources.track { try? FileManager.default.removeItem(at: directory) }
            let setup = EmbeddedGateway.Setup(directory: directory, tlvPort: freePort(), brokerPort: freePort(), metricsPort: freePort())
            return Target(setup: setup, gateway: try await EmbeddedGateway.start(setup))
        }

        /// A device of `user` logged in.
        func device(_ user: String, device: String = "phone") async throws -> TestDevice {
            let connection = try await TestDevice.connect(port: setup.tlvPort)
            try await connection.login(token: try await minter.mint(user: user), device: device)
            return connection
        }

        /// The observer account, subscribed to everything under `im/`.
        func observe() async throws -> (MosquittoClient, Collector<MosquittoMessage>) {
            let credentials = try BrokerCredentials.loadOrCreate(in: setup.dataDirectory)
            var configuration = MosquittoClient.Configuration(
                clientID: BrokerCredentials.observerClientID, host: "127.0.0.1", port: setup.brokerPort)
            configuration.username = BrokerCredentials.observerUsername
            configuration.password = credentials.observerPassword
            let observer = makeClient(configuration: configuration)
            let seen = try await connected(observer)
            #expect(try await observer.subscribe("im/#", qos: .atLeastOnce) == .atLeastOnce)
            return (observer, seen)
        }

        /// What the observer saw up to and including the first message whose payload contains
        /// `marker` (which the test sends last, so anything an attack leaked comes before).
        func seen(_ seen: Collector<MosquittoMessage>, until marker: String) async throws -> [MosquittoMessage] {
            var messages: [MosquittoMessage] = []
            while messages.last?.payloadString.contains(marker) != true {
                messages.append(try await seen.next(within: 10, "the marker \(marker) on the broker"))
            }
            return messages
        }
    }

    /// A JWT signed with nothing (`alg: none`), as an attacker would write one.
    static func unsignedToken(user: String) -> String {
        func part(_ json: String) -> String {
            Data(json.utf8).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        return part(#"{"alg":"none","typ":"JWT"}"#) + "." + part(#"{"sub":"\#(user)","exp":4102444800}"#) + "."
    }

    @Test("tokens: unsigned, another secret, expired, over 8 KiB, bound to another device: each an ERROR and a close at once")
    func tokens() async throws {
        let target = try await Target.start()
        let cases: [(String, LoginRequest, IMErrorCode)] = [
            ("alg none", LoginRequest(token: Self.unsignedToken(user: "alice")), .authFailed),
            ("another secret", LoginRequest(token: try await TokenMinter(secret: "not-the-gateways-secret-0123456789").mint(user: "alice")), .authFailed),
            ("expired", LoginRequest(token: try await target.minter.mint(user: "alice", validFor: -3600)), .tokenExpired),
            ("over 8 KiB", LoginRequest(token: String(repeating: "a", count: 9000)), .badRequest),
            ("bound to another device", LoginRequest(token: try await target.minter.mint(user: "alice", device: "phone"), deviceID: "tablet"), .forbidden),
        ]
        for (what, request, code) in cases {
            let device = try await TestDevice.connect(port: target.setup.tlvPort)
            let started = ContinuousClock.now
            try await device.send(.login(request))
            #expect(try await device.nextError().code == code, "\(what)")
            try await device.closed()
            // The login deadline is 10 s: a refused LOGIN does not wait for it.
            #expect(ContinuousClock.now - started < .seconds(5), "\(what): closed at once")
        }
        // The gateway is unharmed: a good token logs in.
        _ = try await target.device("alice")
        await target.gateway.stop()
    }

    @Test("before LOGIN: chat, publish, subscribe and watches get NOT_LOGGED_IN, and nothing reaches the broker")
    func preLogin() async throws {
        let target = try await Target.start()
        let (observer, seen) = try await target.observe()
        let bob = try await target.device("bob")
        let stranger = try await TestDevice.connect(port: target.setup.tlvPort)
        let requests: [IMMessage] = [
            .chat(ChatSend(to: "bob", messageID: "early-1", content: .text("early"))),
            .publish(Publish(topic: "im/t/room", payload: ByteBuffer(string: "early"), qos: .atLeastOnce)),
            .subscribe(Subscribe(subscriptions: [.init(filter: "im/t/#", qos: .atLeastOnce)])),
            .presenceWatch(PresenceWatch(users: ["bob"])),
            .locationWatch(LocationWatch(users: ["bob"])),
            .locationShareStart(LocationShareStart(audience: ["bob"], duration: 60)),
        ]
        for request in requests {
            let sequence = try await stranger.send(request)
            #expect(try await stranger.nextAck(of: sequence).error == .notLoggedIn, "\(request)")
        }
        let alice = try await target.device("alice")
        #expect(try await alice.chat(to: "bob", id: "marker-1", text: "marker-1").error == nil)
        #expect(try await bob.nextDelivery().messageID == "marker-1", "bob got nothing before alice's chat")
        let leaked = try await target.seen(seen, until: "marker-1").filter { $0.payloadString.contains("early") }
        #expect(leaked.isEmpty, "nothing of the stranger's reached the broker: \(leaked.map(\.topic))")
        await observer.close()
        await target.gateway.stop()
    }

    @Test("spoofing: a CHAT that names another sender (FROM) goes out as the session's user, on the broker too")
    func spoofing() async throws {
        let target = try await Target.start()
        let (observer, seen) = try await target.observe()
        let alice = try await target.device("alice")
        let bob = try await target.device("bob")
        var writer = TLVWriter()
        writer.write(.to, string: "bob")
        writer.write(.from, string: "mallory")
        writer.write(.messageID, string: "spoof-1")
        writer.write(.text, string: "trust me")
        try await alice.write(IMFrame(type: .data, sequence: 900, timestamp: 1_700_000_000, sessionID: 0, body: writer.buffer))
        let delivery = try await bob.nextDelivery()
        #expect(delivery.messageID == "spoof-1" && delivery.from == "alice", "delivered as alice's: \(delivery)")
        let onBroker = try await target.seen(seen, until: "trust me").last
        #expect(onBroker?.topic == "im/u/bob/inbox")
        #expect(onBroker?.payloadString.contains(#""from":"alice""#) == true, "\(onBroker?.payloadString ?? "")")
        #expect(onBroker?.payloadString.contains("mallory") == false)
        await observer.close()
        await target.gateway.stop()
    }

    @Test("topic escapes: chats to ids with wildcards or levels, pub/sub outside im/t/: refused, and nothing reaches bob")
    func topicEscapes() async throws {
        let target = try await Target.start()
        let mallory = try await target.device("mallory")
        let bob = try await target.device("bob")
        let recipients = ["+", "#", "bob/inbox", "../bob", "bob/../carol", "", "bob\u{0}", String(repeating: "b", count: 200)]
        for (index, recipient) in recipients.enumerated() {
            let ack = try await mallory.chat(to: recipient, id: "escape-\(index)", text: "escape")
            #expect(ack.error == .invalidUserID || ack.error == .badRequest, "a chat to \(recipient.debugDescription): \(String(describing: ack.error))")
        }
        // (`..` means nothing in MQTT: `im/t/../u/bob/inbox` is a topic inside im/t/, allowed,
        // and it does not reach bob's inbox, as the marker below shows.)
        #expect(try await mallory.send(.publish(Publish(topic: "im/t/../u/bob/inbox", payload: ByteBuffer(string: "escape")))) > 0)
        for topic in ["im/u/bob/inbox", "im/u/bob/receipts", "../u/bob/inbox", "#", "im/t/+", "im/t/#", "$SYS/x", "/im/u/bob/inbox"] {
            let sequence = try await mallory.send(.publish(Publish(topic: topic, payload: ByteBuffer(string: "escape"), qos: .atLeastOnce)))
            let error = try await mallory.nextAck(of: sequence).error
            #expect(error == .invalidTopic || error == .badRequest, "a publish to \(topic): \(String(describing: error))")
        }
        let filters = ["#", "im/#", "im/u/#", "im/u/+/inbox", "im/u/bob/inbox", "+/u/bob/inbox", "../u/bob/inbox", "$SYS/#"]
        let sequence = try await mallory.send(.subscribe(Subscribe(subscriptions: filters.map { .init(filter: $0, qos: .atLeastOnce) })))
        let results = try await mallory.nextAck(of: sequence).subscriptions
        #expect(results.map(\.filter) == filters)
        for result in results {
            if case .granted = result.outcome { Issue.record("\(result.filter) was granted") }
        }
        // Bob's first delivery is the marker: no escape reached his inbox.
        #expect(try await mallory.chat(to: "bob", id: "marker-2", text: "marker").error == nil)
        #expect(try await bob.nextDelivery().messageID == "marker-2")
        await target.gateway.stop()
    }

    @Test("strings the broker refuses (control characters, non-characters) in message ids, user ids and topics: refused here, and the session goes on")
    func stringsTheBrokerRefuses() async throws {
        let target = try await Target.start()
        let alice = try await target.device("alice")
        let bob = try await target.device("bob")
        // mosquitto ends a connection whose packet carries such a string (MQTT 5 1.5.4), and
        // libmosquitto would send the same packet again at each reconnection.
        // (Non-characters cannot be written in a Swift string literal.)
        func text(_ prefix: String, _ scalar: UInt32) -> String { prefix + String(Unicode.Scalar(scalar)!) }
        for id in [text("a", 0x16), text("a", 0x85), text("a", 0x7F), text("a", 0xFFFE), text("a", 0xFDD0), text("", 0x1FFFF)] {
            let ack = try await alice.chat(to: "bob", id: id, text: "x")
            #expect(ack.error == .badRequest, "message id \(id.unicodeScalars.map { String($0.value, radix: 16) }): \(String(describing: ack.error))")
        }
        for to in [text("bob", 0xFFFE), text("bob", 0xFDEF), text("b", 0x10FFFF)] {
            let ack = try await alice.chat(to: to, id: "to-\(to.unicodeScalars.count)", text: "x")
            #expect(ack.error == .invalidUserID, "recipient \(to.unicodeScalars.map { String($0.value, radix: 16) })")
        }
        let sequence = try await alice.send(.publish(Publish(topic: text("im/t/x", 0xFFFF), payload: ByteBuffer(string: "x"), qos: .atLeastOnce)))
        #expect(try await alice.nextAck(of: sequence).error == .invalidTopic)
        let receipt = try await bob.send(.readReceipt(ReadReceipt(to: "alice", messageID: text("r", 0x16))))
        #expect(try await bob.nextAck(of: receipt).error == .badRequest)
        // Both sessions still work, in both directions.
        #expect(try await alice.chat(to: "bob", id: "after-1", text: "still here").error == nil)
        #expect(try await bob.nextDelivery().messageID == "after-1")
        #expect(try await bob.chat(to: "alice", id: "after-2", text: "me too").error == nil)
        #expect(try await alice.nextDelivery().messageID == "after-2")
        await target.gateway.stop()
    }

    @Test("location grants: no share or outside its audience is FORBIDDEN; ending the share takes the grant away")
    func locationGrants() async throws {
        let target = try await Target.start()
        let alice = try await target.device("alice")
        let bob = try await target.device("bob")
        let mallory = try await target.device("mallory")
        try await mallory.send(.locationWatch(LocationWatch(users: ["alice"])))
        #expect(try await mallory.nextAck().error == .forbidden, "no share yet")
        try await alice.send(.locationShareStart(LocationShareStart(audience: ["bob"], duration: 600)))
        #expect(try await alice.nextAck().error == nil)
        try await mallory.send(.locationWatch(LocationWatch(users: ["alice"])))
        #expect(try await mallory.nextAck().error == .forbidden, "outside the audience")
        try await bob.send(.locationWatch(LocationWatch(users: ["alice"])))
        #expect(try await bob.nextAck().error == nil)
        try await alice.send(.locationShareStop(LocationShareStop()))
        #expect(try await alice.nextAck().error == nil)
        let carol = try await target.device("carol")
        try await carol.send(.locationWatch(LocationWatch(users: ["alice"])))
        #expect(try await carol.nextAck().error == .forbidden, "the share ended")
        // mallory cannot share on alice's behalf either: a share is always the session's own.
        try await mallory.send(.locationShareStart(LocationShareStart(audience: ["mallory"], duration: 600)))
        #expect(try await mallory.nextAck().error == nil)
        try await mallory.send(.locationWatch(LocationWatch(users: ["alice"])))
        #expect(try await mallory.nextAck().error == .forbidden, "mallory's own share grants nothing of alice's")
        await target.gateway.stop()
    }

    @Test("watch flood: 10,000 presence watches from one device, 1,000 granted (limits.max_watches), the rest LIMIT_REACHED; location watches without a share hold nothing")
    func watchFlood() async throws {
        let target = try await Target.start()
        let mallory = try await target.device("mallory")
        var granted = 0
        var refused = 0
        for batch in 0..<100 {
            let users = (0..<100).map { "user-\(batch)-\($0)" }
            let sequence = try await mallory.send(.presenceWatch(PresenceWatch(users: users)))
            switch try await mallory.nextAck(of: sequence).error {
            case nil: granted += users.count
            case .limitReached?: refused += users.count
            case let other: Issue.record("batch \(batch): \(String(describing: other))")
            }
        }
        #expect(granted == 1000 && refused == 9000, "\(granted) granted, \(refused) refused")
        // Location watches are refused before they count: nobody shares with mallory. (The
        // location side of the quota, with shares, is in SubscriptionQuotaTests.)
        for batch in 0..<20 {
            let sequence = try await mallory.send(.locationWatch(LocationWatch(users: (0..<100).map { "user-\(batch)-\($0)" })))
            #expect(try await mallory.nextAck(of: sequence).error == .forbidden)
        }
        // The device still works.
        let bob = try await target.device("bob")
        #expect(try await mallory.chat(to: "bob", id: "after-watches", text: "hi").error == nil)
        #expect(try await bob.nextDelivery().messageID == "after-watches")
        await target.gateway.stop()
    }

    @Test("framing: bad magic, an oversized announced body and a bad CRC each get their ERROR and a close; a pair keeps chatting")
    func framing() async throws {
        let target = try await Target.start()
        let alice = try await target.device("alice")
        let bob = try await target.device("bob")
        let attacks: [(String, [UInt8], IMErrorCode)] = [
            ("bad magic", GatewayTests.header(magic: 0x1234_5678, length: 0), .badMagic),
            ("announced body over the limit", GatewayTests.header(type: 0, length: 50_000_000), .bodyTooLarge),
            ("bad CRC", GatewayTests.header(type: 0, length: 6, crc: 1) + [0x10, 0x01, 0, 0, 0, 0], .badChecksum),
        ]
        for (index, (what, bytes, code)) in attacks.enumerated() {
            let socket = try RawSocket(port: target.setup.tlvPort)
            socket.send(bytes)
            let (frames, closed) = try await socket.readFramesUntilClose()
            #expect(closed, "\(what): closed")
            let notice = errorNotices(frames).first
            #expect(notice?.code == code, "\(what): \(String(describing: notice))")
            #expect(try await alice.chat(to: "bob", id: "after-\(index)", text: "still here").error == nil)
            #expect(try await bob.nextDelivery().messageID == "after-\(index)")
        }
        await target.gateway.stop()
    }

    @Test("slowloris: a LOGIN dribbled a byte every half second is cut at login_timeout (10 s from connect)")
    func slowloris() async throws {
        let target = try await Target.start()
        let socket = try RawSocket(port: target.setup.tlvPort, receiveTimeout: 20)
        let login = try RawSocket.bytes(of: .login(LoginRequest(token: try await target.minter.mint(user: "slow"))), sequence: 1)
        let started = ContinuousClock.now
        let stop = StopFlag()
        let dribbler = Thread {
            for byte in login.dropLast() {
                guard !stop.isSet, socket.send([byte]) else { return }
                usleep(500_000)
            }
        }
        dribbler.start()
        defer { stop.set() }
        let (frames, closed) = try await socket.readFramesUntilClose()
        let took = ContinuousClock.now - started
        #expect(closed)
        #expect(errorNotices(frames).map(\.code) == [.loginTimeout])
        #expect(took >= .seconds(9) && took < .seconds(15), "cut after \(took), though a byte came every half second")
        _ = try await target.device("alice")
        await target.gateway.stop()
    }

    @Test("login flood: past max_connections_awaiting_login (1000) a new connection gets RATE_LIMITED and a close; logged-in devices keep chatting")
    func loginFlood() async throws {
        let target = try await Target.start()
        let alice = try await target.device("alice")
        let bob = try await target.device("bob")
        // 1,000 connections that never log in, 100 from each of ten loopback addresses (so the
        // per-address limit, also 1,000, is not what stops them).
        // (Blocking connects, on a thread of their own: not on Swift's cooperative pool, which
        // the rest of the suite needs.)
        let port = target.setup.tlvPort
        var flood: [RawSocket] = try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(with: Result { try (0..<1000).map { try RawSocket(port: port, from: "127.0.0.\(2 + $0 / 100)") } })
            }
        }
        // The gateway takes connections in order: once this one is refused, all 1,000 count.
        let extra = try RawSocket(port: target.setup.tlvPort, from: "127.0.0.20")
        let (frames, closed) = try await extra.readFramesUntilClose()
        #expect(closed)
        let notice = errorNotices(frames).first
        #expect(notice?.code == .rateLimited, "\(String(describing: notice))")
        // The devices already logged in are not starved.
        for index in 0..<20 {
            #expect(try await alice.chat(to: "bob", id: "flood-\(index)", text: "still here").error == nil)
            #expect(try await bob.nextDelivery().messageID == "flood-\(index)")
        }
        // One flood connection gone: a real device gets in (once the gateway has seen the close).
        flood.removeFirst()
        var loggedIn = false
        let token = try await target.minter.mint(user: "carol")
        for _ in 0..<100 where !loggedIn {
            let device = try await TestDevice.connect(port: target.setup.tlvPort)
            // A refused connection may be closed before the LOGIN is written or answered.
            if (try? await device.send(.login(LoginRequest(token: token, deviceID: "phone")))) != nil,
               case (_, .loginOK)? = try? await device.next(within: 10, "LOGIN_OK or the refusal") {
                loggedIn = true
            }
            await device.drop()
        }
        #expect(loggedIn, "a login got in once there was room")
        flood.removeAll()
        await target.gateway.stop()
    }
}

/// Tells a helper thread to stop.
final class StopFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    var isSet: Bool { flag.load(ordering: .relaxed) }
    func set() { flag.store(true, ordering: .relaxed) }
}
