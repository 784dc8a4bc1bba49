import Foundation
import IMGateway
import IMTestSupport
import IMWire
import Synchronization
import Testing

/// PROTOCOL.md 6.14's rule of acceptance: a chat the archive holds is published, whatever
/// happens to the connection (or HTTP request) it came from. A sender whose app is killed, or
/// whose network goes, right after sending must not leave an online recipient without the
/// message until a later login or a later message.
@Suite("A stored chat reaches its online recipient whatever happens to its sender", .serialized, .stopsWhatItStarts)
struct StoredChatDeliveryTests {
    /// Where the chats come from.
    enum Source: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// A device's one-to-one CHAT.
        case device
        /// A device's group CHAT.
        case deviceGroup
        /// The server API's one-to-one send.
        case api
        /// The server API's group send.
        case apiGroup

        var testDescription: String { rawValue }
        var isGroup: Bool { self == .deviceGroup || self == .apiGroup }
    }

    static let sends = 150

    @Test(
        "the sender's connection ends 0-3 ms after sending (a reset or a close): every chat the archive holds reaches the online recipient, live, within 1 s, once",
        arguments: Source.allCases)
    func senderGoneAtOnce(_ source: Source) async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true)
        let created = try await ServerAPITests.call(gateway, "POST", "/v1/groups/pair", body: #"{"members":["alice","bob"]}"#)
        try #require(created.status == 201, "\(created.body)")
        let bob = try await Recipient(gateway)
        let token = try await TokenMinter(secret: IMGWProcess.secret).mint(user: "alice")

        var ended: [String: ContinuousClock.Instant] = [:]
        var generator = SystemRandomNumberGenerator()
        for index in 0..<Self.sends {
            let id = "\(source.rawValue)-\(index)"
            let socket: RawSocket
            switch source {
            case .device, .deviceGroup:
                socket = try RawSocket(port: gateway.port)
                try socket.send(.login(LoginRequest(token: token, deviceID: "phone")), sequence: 1)
                let frames = try await socket.readFrames { frame in
                    if case .loginOK? = try? IMMessage(frame: frame) { return true }
                    if case .error? = try? IMMessage(frame: frame) { return true }
                    return false
                }
                guard case .loginOK? = frames.last.flatMap({ try? IMMessage(frame: $0) }) else {
                    Issue.record("alice's login \(index) failed: \(frames.map { try? IMMessage(frame: $0) })")
                    return
                }
                let chat = source == .device
                    ? ChatSend(to: "bob", messageID: id, content: .text("hello \(index)"))
                    : ChatSend(group: "pair", messageID: id, content: .text("hello \(index)"))
                try socket.send(.chat(chat), sequence: 2)
            case .api, .apiGroup:
                socket = try RawSocket(port: gateway.apiPort)
                let path = source == .api ? "/v1/users/bob/messages" : "/v1/groups/pair/messages"
                let body = #"{"id":"\#(id)","from":"alice","text":"hello \#(index)"}"#
                socket.send(Array((
                    "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(IMGWProcess.apiKey)\r\n"
                        + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)").utf8))
            }
            // The app dies, or the network goes, at once or a few milliseconds later.
            // (Task.sleep, not usleep: a blocked thread of the test's small pool would delay
            // bob's reader, and with it what the test measures.)
            let pause = Int.random(in: 0...3_000, using: &generator)
            if pause > 0 { try await Task.sleep(for: .microseconds(pause)) }
            if index % 2 == 0 { socket.reset() } else { socket.close() }
            ended[id] = .now
        }

        // What the archive holds of them (read through the gateway's own history API), and what
        // bob got, once both have settled.
        let deadline = ContinuousClock.now + .seconds(15)
        var stored: Set<String> = []
        while true {
            stored = try await Self.storedIDs(gateway, group: source.isGroup)
            if stored.isSubset(of: bob.received) || ContinuousClock.now > deadline { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        // Anything still on its way (a duplicate would be delivered later than the first copy);
        // then the archive read again, after what bob got (a chat is published after its
        // commit, so one bob got since the last read is in this one).
        try await Task.sleep(for: .milliseconds(500))
        let deliveries = bob.deliveries
        stored = try await Self.storedIDs(gateway, group: source.isGroup)
        let sent = Set(ended.keys)
        let received = Set(deliveries.map(\.id))

        #expect(stored.isSubset(of: sent), "the archive holds chats nobody sent: \(stored.subtracting(sent).sorted())")
        #expect(
            stored.count >= Self.sends / 10,
            "only \(stored.count) of \(Self.sends) chats were stored: the test did not test much; imgw said: \(gateway.output.text.withLock { $0.suffix(3000) })")
        let missing = stored.subtracting(received)
        #expect(missing.isEmpty, "\(missing.count) of \(stored.count) stored chats never reached bob while he was online: \(missing.sorted().prefix(10))")
        let unstoredButDelivered = received.intersection(sent).subtracting(stored)
        #expect(unstoredButDelivered.isEmpty, "delivered but not in the archive: \(unstoredButDelivered.sorted())")
        var late: [String] = []
        var replayed: [String] = []
        var twice: [String] = []
        for id in stored.sorted() {
            let copies = deliveries.filter { $0.id == id }
            guard let first = copies.first, let end = ended[id] else { continue }
            if copies.count > 1 { twice.append(id) }
            if first.archived { replayed.append(id) }
            if first.at - end > .seconds(1) { late.append("\(id) after \(first.at - end)") }
        }
        #expect(replayed.isEmpty, "\(replayed.count) stored chats reached bob only from the archive (a gap repaired later), not live: \(replayed.prefix(10))")
        #expect(late.isEmpty, "\(late.count) stored chats took more than 1 s: \(late.prefix(10))")
        #expect(twice.isEmpty, "\(twice.count) chats reached bob more than once: \(twice.prefix(10))")
        await bob.stop()
    }

    @Test("the sender's connection ends 0-150 ms after a DELETE: every deletion the archive holds reaches the online recipient as a tombstone, live, within 1 s, once")
    func deleterGoneAtOnce() async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true)
        let bob = try await Recipient(gateway)
        let token = try await TokenMinter(secret: IMGWProcess.secret).mint(user: "alice")
        let count = 80
        for index in 0..<count {
            let sent = try await ServerAPITests.call(gateway, "POST", "/v1/users/bob/messages", body: #"{"id":"d-\#(index)","from":"alice","text":"x"}"#)
            try #require(sent.status == 202, "\(sent.body)")
        }
        let deadline = ContinuousClock.now + .seconds(15)
        while bob.received.count < count && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        try #require(bob.received.count == count, "bob got \(bob.received.count) of \(count) messages")

        var ended: [String: ContinuousClock.Instant] = [:]
        var generator = SystemRandomNumberGenerator()
        for index in 0..<count {
            let socket = try RawSocket(port: gateway.port)
            try socket.send(.login(LoginRequest(token: token, deviceID: "phone")), sequence: 1)
            let frames = try await socket.readFrames { frame in
                if case .loginOK? = try? IMMessage(frame: frame) { return true }
                if case .error? = try? IMMessage(frame: frame) { return true }
                return false
            }
            try #require(frames.contains { if case .loginOK? = try? IMMessage(frame: $0) { true } else { false } }, "login \(index)")
            try socket.send(.delete(MessageDelete(messageID: "d-\(index)")), sequence: 2)
            // A deletion is a request, answered after its tombstones are stored and published
            // (about 100 ms here): the connection ends anywhere in that time.
            let pause = Int.random(in: 0...150_000, using: &generator)
            if pause > 0 { try await Task.sleep(for: .microseconds(pause)) }
            if index % 2 == 0 { socket.reset() } else { socket.close() }
            ended["d-\(index)"] = .now
        }

        // The deletions the archive holds: bob's history shows those messages deleted.
        var deleted: Set<String> = []
        let settle = ContinuousClock.now + .seconds(15)
        while true {
            let page = try await ServerAPITests.call(gateway, "GET", "/v1/users/bob/history/with/alice?limit=200")
            let messages = page.json?["messages"] as? [[String: Any]] ?? []
            deleted = Set(messages.filter { $0["deleted"] as? Bool == true }.compactMap { $0["id"] as? String })
            let tombstones = Set(bob.deliveries.filter(\.deleted).map(\.id))
            if deleted.isSubset(of: tombstones) || ContinuousClock.now > settle { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        try await Task.sleep(for: .milliseconds(500))
        let tombstones = bob.deliveries.filter(\.deleted)
        #expect(deleted.count >= count / 10, "only \(deleted.count) of \(count) deletions were stored: the test did not test much")
        let missing = deleted.subtracting(tombstones.map(\.id))
        #expect(missing.isEmpty, "\(missing.count) of \(deleted.count) stored deletions never reached bob while he was online: \(missing.sorted().prefix(10)); imgw: \(gateway.output.text.withLock { $0.suffix(6000) })")
        var late: [String] = []
        var twice: [String] = []
        for id in deleted.sorted() {
            let copies = tombstones.filter { $0.id == id }
            guard let first = copies.first, let end = ended[id] else { continue }
            if copies.count > 1 { twice.append(id) }
            if first.archived || first.at - end > .seconds(1) { late.append("\(id) after \(first.at - end)\(first.archived ? " (replayed)" : "")") }
        }
        #expect(late.isEmpty, "\(late.count) tombstones were not live within 1 s: \(late.prefix(10))")
        #expect(twice.isEmpty, "\(twice.count) tombstones reached bob more than once: \(twice.prefix(10))")
        await bob.stop()
    }

    /// The ids of alice's messages in bob's conversation with her (or in the group), from the
    /// archive, through the server API's history.
    static func storedIDs(_ gateway: IMGWProcess, group: Bool) async throws -> Set<String> {
        var ids: Set<String> = []
        var after: Int64 = 0
        while true {
            let path = group ? "/v1/users/bob/history/group/pair" : "/v1/users/bob/history/with/alice"
            let page = try await ServerAPITests.call(gateway, "GET", "\(path)?after=\(after)&limit=200")
            guard page.status == 200, let messages = page.json?["messages"] as? [[String: Any]] else {
                throw TestError("history: \(page.status) \(page.body)")
            }
            for message in messages {
                if let id = message["id"] as? String, message["from"] as? String == "alice" { ids.insert(id) }
                if let offset = (message["offset"] as? NSNumber)?.int64Value { after = max(after, offset) }
            }
            if page.json?["complete"] as? Bool == true || messages.isEmpty { return ids }
        }
    }

    /// Bob's phone: logged in for the whole test, ACKing every delivery as it comes.
    final class Recipient: Sendable {
        struct Delivery: Sendable {
            var id: String
            var at: ContinuousClock.Instant
            var archived: Bool
            /// A tombstone (the message was deleted for everyone).
            var deleted = false
        }

        /// What arrived, in order.
        final class Log: Sendable {
            let items = Mutex<[Delivery]>([])
        }

        private let device: TestDevice
        private let log = Log()
        private let reader: Task<Void, Never>

        init(_ gateway: IMGWProcess) async throws {
            let device = try await gateway.device("bob")
            self.device = device
            let log = self.log
            reader = Task {
                while !Task.isCancelled {
                    guard let frame = try? await device.frames.next(within: 3_600, "a frame for bob") else { return }
                    guard case .delivery(let delivery)? = try? IMMessage(frame: frame) else { continue }
                    let at = ContinuousClock.now
                    log.items.withLock { $0.append(Delivery(id: delivery.messageID, at: at, archived: delivery.archived, deleted: delivery.deleted)) }
                    try? await device.ack(frame)
                }
            }
        }

        var deliveries: [Delivery] { log.items.withLock { $0 } }
        var received: Set<String> { Set(deliveries.map(\.id)) }

        func stop() async {
            reader.cancel()
            await device.drop()
            await reader.value
        }
    }
}
