import Foundation
import IMClient
import IMGateway
import IMWire
import Testing
import IMTestSupport

/// Groups (PROTOCOL.md 6.11), carbons (6.12) and typing (6.13) on real imgw processes and a
/// real broker, the membership set through the server API.
@Suite("Groups, carbons and typing", .serialized, .stopsWhatItStarts, .startsEjabberdNodes)
struct GroupTests {
    let minter = TokenMinter(secret: IMGWProcess.secret)

    func device(_ gateway: IMGWProcess, _ user: String, _ device: String = "phone", carbons: Bool? = nil) async throws -> TestDevice {
        let connection = try await TestDevice.connect(port: gateway.port)
        try await connection.send(.login(LoginRequest(token: try await minter.mint(user: user), deviceID: device, carbons: carbons)))
        guard case (_, .loginOK) = try await connection.next(within: 10, "LOGIN_OK") else { throw TestError("\(user)/\(device): no LOGIN_OK") }
        return connection
    }

    /// Logs `user`'s device in once and out again, so that its session keeps what comes.
    func loggedOut(_ gateway: IMGWProcess, _ user: String, _ device: String = "phone") async throws {
        let connection = try await self.device(gateway, user, device)
        try await connection.send(.logout(Logout()))
        try await connection.closed()
    }

    static func api(_ gateway: IMGWProcess, _ method: String, _ path: String, _ body: String? = nil) async throws -> ServerAPITests.Answer {
        try await ServerAPITests.call(gateway, method, path, body: body)
    }

    @Test("a member offline during three messages gets all three in order at login; an online member gets them as they come", arguments: BrokerKind.allCases)
    func offlineMember(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true)
        let created = try await Self.api(gateway, "POST", "/v1/groups/team", #"{"members":["alice","bob","carol"]}"#)
        #expect(created.status == 201, "\(created.body)")
        try await loggedOut(gateway, "bob")
        let alice = try await device(gateway, "alice")
        let carol = try await device(gateway, "carol")

        for index in 1...3 {
            let ack = try await alice.groupChat("team", id: "g-\(index)", text: "message \(index)")
            #expect(ack.error == nil && ack.serverTime != nil, "\(ack)")
        }
        var online: [String] = []
        for _ in 1...3 {
            let delivery = try await carol.nextDelivery()
            #expect(delivery.group == "team" && delivery.from == "alice" && !delivery.carbon)
            online.append(delivery.messageID)
        }
        #expect(online == ["g-1", "g-2", "g-3"])

        let bob = try await device(gateway, "bob")
        var queued: [String] = []
        for _ in 1...3 {
            let delivery = try await bob.nextDelivery()
            #expect(delivery.group == "team" && delivery.from == "alice")
            queued.append(delivery.messageID)
        }
        #expect(queued == ["g-1", "g-2", "g-3"], "in the order alice sent them")
    }

    @Test("the broker loses every retained membership (kill -9 before a save): with the archive, the group and a removal in it hold, and group chat goes on")
    func membershipSurvivesBroker() async throws {
        let port = freePort()
        var broker = try await TestBroker.start(port: port)
        let archive = IMGWProcess.Archive.sqliteFile(broker.directory.appendingPathComponent("groups-archive.sqlite").path)
        var gateway = try await IMGWProcess.start(broker: broker, api: true, archive: archive)
        #expect(try await Self.api(gateway, "POST", "/v1/groups/team", #"{"members":["alice","bob","carol"]}"#).status == 201)
        #expect(try await Self.api(gateway, "DELETE", "/v1/groups/team/members/carol").status == 200)

        // The gateway restarts (nothing in memory) on a broker that lost everything.
        _ = await gateway.stop(within: .seconds(10))
        await broker.kill9()
        broker = try await TestBroker.start(port: port)
        gateway = try await IMGWProcess.start(broker: broker, api: true, archive: archive)
        let alice = try await device(gateway, "alice")
        let bob = try await device(gateway, "bob")
        let carol = try await device(gateway, "carol")
        let ack = try await alice.groupChat("team", id: "after-restart", text: "still a group")
        #expect(ack.error == nil, "the group is gone with the broker's state: \(ack)")
        if ack.error == nil {
            let delivery = try await bob.nextDelivery()
            #expect(delivery.group == "team" && delivery.messageID == "after-restart")
        }
        let refused = try await carol.groupChat("team", id: "carol-1", text: "removed before")
        #expect(refused.error == .forbidden, "the removal holds too")
        let listed = try await Self.api(gateway, "GET", "/v1/groups/team/members")
        #expect(listed.status == 200 && listed.body.contains("alice") && listed.body.contains("bob") && !listed.body.contains("carol"), "\(listed.body)")
    }

    @Test("membership: a member added while offline gets what follows, not what came before; a removed member gets nothing after the removal; a non-member is FORBIDDEN", arguments: BrokerKind.allCases)
    func membershipChanges(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true, archive: .none)
        let other = try await IMGWProcess.start(broker: broker, api: true, archive: .none)
        #expect(try await Self.api(gateway, "POST", "/v1/groups/team", #"{"members":["alice","carol"]}"#).status == 201)
        try await loggedOut(gateway, "dave")
        let alice = try await device(other, "alice")
        let carol = try await device(gateway, "carol")
        let mallory = try await device(other, "mallory")

        #expect(try await alice.groupChat("team", id: "before", text: "before dave").error == nil)
        let added = try await Self.api(gateway, "PUT", "/v1/groups/team/members/dave")
        #expect(added.status == 200 && added.json?["added"] as? Bool == true, "\(added.body)")
        let again = try await Self.api(gateway, "PUT", "/v1/groups/team/members/dave")
        #expect(again.json?["added"] as? Bool == false && again.json?["since"] as? Int == added.json?["since"] as? Int)
        let removed = try await Self.api(gateway, "DELETE", "/v1/groups/team/members/carol")
        #expect(removed.status == 200 && removed.json?["removed"] as? Bool == true, "\(removed.body)")
        let listed = try await Self.api(gateway, "GET", "/v1/groups/team/members")
        #expect((listed.json?["members"] as? [[String: Any]])?.compactMap { $0["user"] as? String } == ["alice", "dave"], "\(listed.body)")

        // Through the other gateway, which learns of the changes from the broker within
        // milliseconds; its API shows when (no event says so to a test).
        let deadline = ContinuousClock.now + .seconds(10)
        while try await Self.api(other, "GET", "/v1/groups/team/members").json.map({ json in
            (json["members"] as? [[String: Any]])?.compactMap { $0["user"] as? String } != ["alice", "dave"]
        }) ?? true {
            guard ContinuousClock.now < deadline else { throw TestError("the other gateway did not learn of the changes") }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(try await alice.groupChat("team", id: "after", text: "after the changes").error == nil)
        let forbidden = try await mallory.groupChat("team", id: "m-1", text: "let me in")
        #expect(forbidden.error == .forbidden, "\(forbidden)")
        let invalid = try await mallory.groupChat(String(repeating: "t", count: 65), id: "m-2", text: "a group id that is too long")
        #expect(invalid.error != nil && invalid.errorMessage?.contains("group id") == true && invalid.errorMessage?.contains("user") == false,
                "the refusal names a group id: \(invalid)")

        // carol: "before" only; then a one-to-one message shows nothing else came in between.
        #expect(try await carol.nextDelivery().messageID == "before")
        #expect(try await alice.chat(to: "carol", id: "direct", text: "just you").error == nil)
        #expect(try await carol.nextDelivery().messageID == "direct", "nothing sent to the group after her removal")

        let dave = try await device(gateway, "dave")
        #expect(try await dave.nextDelivery().messageID == "after", "only what came after he was added")
        #expect(try await alice.chat(to: "dave", id: "direct-2", text: "welcome").error == nil)
        #expect(try await dave.nextDelivery().messageID == "direct-2", "and no message of mallory's")
    }

    @Test("receipts reach the sender per member", arguments: BrokerKind.allCases)
    func receiptsPerMember(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true)
        #expect(try await Self.api(gateway, "POST", "/v1/groups/team", #"{"members":["alice","bob","carol"]}"#).status == 201)
        let alice = try await device(gateway, "alice")
        let bob = try await device(gateway, "bob")
        let carol = try await device(gateway, "carol")
        #expect(try await alice.groupChat("team", id: "r-1", text: "read me").error == nil)
        _ = try await bob.nextDelivery()
        _ = try await carol.nextDelivery()
        let read = try await carol.send(.readReceipt(ReadReceipt(to: "alice", messageID: "r-1")))
        _ = try await carol.nextAck(of: read)
        var notices: Set<String> = []
        while notices.count < 3 {
            let (frame, message) = try await alice.next(within: 10, "alice's receipt notices")
            guard case .receiptNotice(let notice) = message else { continue }
            try await alice.ack(frame)
            #expect(notice.messageID == "r-1")
            notices.insert("\(notice.from) \(notice.kind == .read ? "read" : "delivered")")
        }
        #expect(notices == ["bob delivered", "carol delivered", "carol read"])
    }

    @Test("carbons: what one device of a user sends, one-to-one or to a group, reaches the user's other devices, an offline one at login in order; not the sender; not a device that opted out", arguments: BrokerKind.allCases)
    func carbons(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true)
        let created = try await Self.api(gateway, "POST", "/v1/groups/team", #"{"members":["alice","bob"]}"#)
        #expect(created.status == 201, "\(created.body)")
        try await loggedOut(gateway, "alice", "tablet")
        let watch = try await device(gateway, "alice", "watch", carbons: false)
        let phone = try await device(gateway, "alice", "phone")
        let bob = try await device(gateway, "bob")

        #expect(try await phone.chat(to: "bob", id: "c-1", text: "one to one").error == nil)
        #expect(try await phone.groupChat("team", id: "c-2", text: "to the group").error == nil)
        #expect(try await bob.nextDelivery().messageID == "c-1")
        #expect(try await bob.nextDelivery().messageID == "c-2")

        let tablet = try await device(gateway, "alice", "tablet")
        let first = try await tablet.nextDelivery()
        let second = try await tablet.nextDelivery()
        #expect(first.carbon && first.from == "alice" && first.to == "bob" && first.messageID == "c-1" && first.content.text == "one to one")
        #expect(second.carbon && second.from == "alice" && second.group == "team" && second.messageID == "c-2")

        // Neither the phone (its own messages) nor the watch (CARBONS 0) got a copy: a later
        // message from bob is the first delivery each sees.
        #expect(try await bob.chat(to: "alice", id: "b-1", text: "got them").error == nil)
        #expect(try await phone.nextDelivery().messageID == "b-1")
        #expect(try await watch.nextDelivery().messageID == "b-1")
        #expect(try await tablet.nextDelivery().messageID == "b-1", "a received message reaches every device")
    }

    @Test("typing reaches an online peer and group members, never an offline device; past 4 a second it is RATE_LIMITED", arguments: BrokerKind.allCases)
    func typing(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true, archive: .none)
        let other = try await IMGWProcess.start(broker: broker, archive: .none)
        #expect(try await Self.api(gateway, "POST", "/v1/groups/team", #"{"members":["alice","bob","carol"]}"#).status == 201)
        try await loggedOut(gateway, "carol")
        let alice = try await device(gateway, "alice")
        let bob = try await device(other, "bob")

        let toBob = try await alice.send(.typing(Typing(to: "bob", state: .typing)))
        #expect(try await alice.nextAck(of: toBob).error == nil)
        let toCarol = try await alice.send(.typing(Typing(to: "carol", state: .typing)))
        #expect(try await alice.nextAck(of: toCarol).error == nil)
        let inTeam = try await alice.send(.typing(Typing(group: "team", state: .recording)))
        #expect(try await alice.nextAck(of: inTeam).error == nil)

        var seen: [Typing] = []
        while seen.count < 2 {
            let (_, message) = try await bob.next(within: 10, "bob's typing notices")
            if case .typing(let typing) = message { seen.append(typing) }
        }
        #expect(seen == [Typing(from: "alice", state: .typing), Typing(group: "team", from: "alice", state: .recording)])

        // carol was offline: at her login, the chat sent after the signals comes, and no TYPING.
        let carol = try await device(gateway, "carol")
        #expect(try await alice.chat(to: "carol", id: "after-typing", text: "hi").error == nil)
        var frames: [IMMessage] = []
        while true {
            let (frame, message) = try await carol.next(within: 10, "carol's delivery")
            frames.append(message)
            if case .delivery = message {
                try await carol.ack(frame)
                break
            }
        }
        #expect(!frames.contains { if case .typing = $0 { true } else { false } }, "\(frames)")

        // A non-member is refused; bursts past the limit too.
        let mallory = try await device(other, "mallory")
        let refused = try await mallory.send(.typing(Typing(group: "team", state: .typing)))
        #expect(try await mallory.nextAck(of: refused).error == .forbidden)
        var codes: [IMErrorCode?] = []
        for _ in 0..<12 {
            let sequence = try await mallory.send(.typing(Typing(to: "bob", state: .typing)))
            let ack = try await mallory.nextAck(of: sequence)
            codes.append(ack.error)
            if ack.error == .rateLimited { #expect((ack.retryAfter ?? 0) > 0) }
        }
        #expect(codes.contains(.rateLimited) && codes.prefix(7).allSatisfy { $0 == nil }, "\(codes)")
    }

    @Test("IMClient: a group message, its carbon and a typing state arrive as events")
    func client() async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true)
        let created = try await Self.api(gateway, "POST", "/v1/groups/team", #"{"members":["alice","bob"]}"#)
        #expect(created.status == 201, "\(created.body)")
        func connect(_ user: String, _ device: String) async throws -> IMClient {
            tracked(try await IMClient.connect(.init(port: gateway.port, token: try await minter.mint(user: user), deviceID: device)))
        }
        let phone = try await connect("alice", "phone")
        let tablet = try await connect("alice", "tablet")
        let bob = try await connect("bob", "phone")
        let tabletEvents = Collector(tablet.events)
        let bobEvents = Collector(bob.events)

        let sent = try await phone.send(toGroup: "team", text: "hi team", messageID: "cg-1")
        let received = try await nextMessage(bobEvents)
        #expect(received.group == "team" && received.from == "alice" && !received.isCarbon && received.serverTime == sent.serverTime)
        let carbon = try await nextMessage(tabletEvents)
        #expect(carbon.isCarbon && carbon.group == "team" && carbon.messageID == "cg-1" && carbon.text == "hi team")

        try await phone.sendTyping(.typing, to: "bob")
        while true {
            if case .typing(let typing) = try await bobEvents.next(within: 10, "bob's typing event") {
                #expect(typing == IMClient.TypingUpdate(from: "alice", state: .typing))
                break
            }
        }
        // A group bob is not in: FORBIDDEN (nobody is in "other").
        do {
            try await bob.sendTyping(.typing, inGroup: "other")
            Issue.record("not refused")
        } catch {
            if case .refused(let code, _) = error { #expect(code == .forbidden) } else { Issue.record("\(error)") }
        }
    }

    @Test("imcli: admin group create and members, group send, typing; a non-member's send exits 2 with FORBIDDEN")
    func cli() async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true)
        let url = "http://127.0.0.1:\(gateway.apiPort)"
        func imcli(_ arguments: [String]) async throws -> (status: Int32, output: String) {
            try await IMClientIntegrationTests.runCLI(arguments)
        }
        let created = try await imcli(["admin", "group", "create", "team", "alice", "bob", "--url", url, "--key", IMGWProcess.apiKey])
        #expect(created.status == 0 && created.output.contains("created team: alice, bob"), "\(created.output)")
        let members = try await imcli(["admin", "group", "members", "team", "--url", url, "--key", IMGWProcess.apiKey])
        #expect(members.status == 0 && members.output.contains("team: 2 members") && members.output.contains("  bob since"), "\(members.output)")

        let bob = try await device(gateway, "bob")
        let port = ["--port", String(gateway.port)]
        let sent = try await imcli(["group", "send", "--token", try await minter.mint(user: "alice"), "--group", "team", "--id", "cli-g1", "hi", "team"] + port)
        #expect(sent.status == 0 && sent.output.contains("sent cli-g1 to team"), "\(sent.output)")
        let delivery = try await bob.nextDelivery()
        #expect(delivery.group == "team" && delivery.from == "alice" && delivery.content.text == "hi team")
        let typed = try await imcli(["typing", "--token", try await minter.mint(user: "alice"), "--to", "bob", "recording"] + port)
        #expect(typed.status == 0, "\(typed.output)")
        while true {
            let (_, message) = try await bob.next(within: 10, "bob's TYPING")
            if case .typing(let typing) = message {
                #expect(typing == Typing(from: "alice", state: .recording))
                break
            }
        }
        let refused = try await imcli(["group", "send", "--token", try await minter.mint(user: "mallory"), "--group", "team", "let me in"] + port)
        #expect(refused.status == 2 && refused.output.contains("FORBIDDEN"), "\(refused.output)")
    }
}
