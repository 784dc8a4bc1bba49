import Foundation
import IMGateway
import IMWire
import Testing
import IMTestSupport

/// The server API (docs/openapi.yaml) of real imgw processes on a real broker, called over
/// HTTP by curl.
@Suite("Server API", .serialized, .stopsWhatItStarts, .startsEjabberdNodes)
struct ServerAPITests {
    /// An answer: the status and the JSON body (nil if it is not a JSON object).
    struct Answer {
        let status: Int
        let json: [String: Any]?
        let body: String
    }

    /// `method path` on `gateway`'s API, with `key` as bearer token (none if nil) or a whole
    /// `authorization` header, and `body` as JSON.
    static func call(
        _ gateway: IMGWProcess, _ method: String, _ path: String, body: String? = nil,
        key: String? = IMGWProcess.apiKey, authorization: String? = nil
    ) async throws -> Answer {
        var arguments = ["-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method]
        if let authorization {
            arguments += ["-H", "Authorization: \(authorization)"]
        } else if let key {
            arguments += ["-H", "Authorization: Bearer \(key)"]
        }
        if let body { arguments += ["-H", "Content-Type: application/json", "--data-binary", body] }
        arguments.append("http://127.0.0.1:\(gateway.apiPort)\(path)")
        let output = try await run("/usr/bin/curl", arguments)
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
        let text = lines.dropLast().joined(separator: "\n")
        let json = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
        return Answer(status: Int(lines.last ?? "") ?? 0, json: json, body: text)
    }

    @Test("401 for a missing, wrong or malformed key, with nothing else said; the key never in the log")
    func unauthorized() async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true)
        let attempts: [(String, String?, String?)] = [
            ("no header", nil, nil),
            ("a wrong key", "not-the-key-0123456789abcdef0123456789", nil),
            ("the key with another scheme", nil, "Basic \(IMGWProcess.apiKey)"),
            ("bearer without a key", nil, "Bearer"),
            ("the key with a byte more", IMGWProcess.apiKey + "x", nil),
            ("a prefix of the key", String(IMGWProcess.apiKey.dropLast()), nil),
        ]
        for (what, key, authorization) in attempts {
            for (method, path, body) in [("GET", "/v1/users/alice/presence", nil), ("POST", "/v1/users/alice/messages", #"{"id":"m","text":"x"}"#)] {
                let answer = try await Self.call(gateway, method, path, body: body, key: key, authorization: authorization)
                #expect(answer.status == 401, "\(what), \(method) \(path): \(answer.status) \(answer.body)")
                #expect(answer.json?["error"] as? String == "unauthorized", "\(what): \(answer.body)")
            }
        }
        // The right key works, and the log names its holder.
        #expect(try await Self.call(gateway, "GET", "/v1/users/alice/presence").status == 200)
        #expect(try await Self.call(gateway, "POST", "/v1/users/alice/messages", body: #"{"id":"m-1","text":"x"}"#).status == 202)
        let log = gateway.output.text.withLock { $0 }
        #expect(log.contains("API request refused: no valid key"))
        #expect(log.contains("api_key=backend"), "the key's name is in the log")
        #expect(!log.contains(IMGWProcess.apiKey.dropLast(4)), "no log line holds the key (or most of it)")
        await gateway.stop()
    }

    @Test("a message sent through the API reaches the device; a repeat with the same id is not delivered twice; another text under that id is 409", arguments: BrokerKind.allCases)
    func sendMessage(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let bob = try await TestDevice.connect(port: gateway.port)
        try await bob.login(token: try await minter.mint(user: "bob"), device: "phone")

        let body = #"{"id":"api-1","from":"alice","text":"hello from the backend"}"#
        let first = try await Self.call(gateway, "POST", "/v1/users/bob/messages", body: body)
        #expect(first.status == 202, "\(first.body)")
        #expect(first.json?["repeat"] as? Bool == false)
        #expect(first.json?["from"] as? String == "alice" && first.json?["to"] as? String == "bob")
        let delivery = try await bob.nextDelivery()
        #expect(delivery.messageID == "api-1" && delivery.from == "alice")
        #expect(delivery.content.text == "hello from the backend")

        let again = try await Self.call(gateway, "POST", "/v1/users/bob/messages", body: body)
        #expect(again.status == 202)
        #expect(again.json?["repeat"] as? Bool == true)
        #expect(again.json?["server_time"] as? Int == first.json?["server_time"] as? Int, "answered like the first")
        let conflict = try await Self.call(gateway, "POST", "/v1/users/bob/messages", body: #"{"id":"api-1","from":"alice","text":"something else"}"#)
        #expect(conflict.status == 409 && conflict.json?["error"] as? String == "conflict", "\(conflict.body)")

        // Without from: the system sender.
        let system = try await Self.call(gateway, "POST", "/v1/users/bob/messages", body: #"{"id":"api-2","text":"maintenance at 2am"}"#)
        #expect(system.status == 202 && system.json?["from"] as? String == "system")
        let next = try await bob.nextDelivery()
        #expect(next.messageID == "api-2" && next.from == "system", "api-1 came once, then api-2")
        await gateway.stop()
    }

    @Test("a message sent as a user is that user's too (6.14): a carbon to each of her devices, in her history, one-to-one and in a group; the system sender has neither")
    func sentAsUser() async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let alice = try await TestDevice.connect(port: gateway.port)
        try await alice.login(token: try await minter.mint(user: "alice"), device: "phone")
        let bob = try await TestDevice.connect(port: gateway.port)
        try await bob.login(token: try await minter.mint(user: "bob"), device: "phone")

        let direct = try await Self.call(gateway, "POST", "/v1/users/bob/messages", body: #"{"id":"as-1","from":"alice","text":"from the web app"}"#)
        #expect(direct.status == 202, "\(direct.body)")
        #expect(try await bob.nextDelivery().messageID == "as-1")
        let carbon = try await alice.nextDelivery(within: 10, "the carbon of as-1")
        #expect(carbon.messageID == "as-1" && carbon.carbon && carbon.from == "alice" && carbon.to == "bob")
        let history = try await Self.call(gateway, "GET", "/v1/users/alice/history/with/bob")
        let messages = history.json?["messages"] as? [[String: Any]] ?? []
        #expect(messages.map { $0["id"] as? String } == ["as-1"] && messages.first?["carbon"] as? Bool == true, "\(history.body)")

        #expect(try await Self.call(gateway, "POST", "/v1/groups/team", body: #"{"members":["alice","bob"]}"#).status == 201)
        let group = try await Self.call(gateway, "POST", "/v1/groups/team/messages", body: #"{"id":"as-2","from":"alice","text":"to the team"}"#)
        #expect(group.status == 202, "\(group.body)")
        #expect(try await bob.nextDelivery().messageID == "as-2")
        let groupCarbon = try await alice.nextDelivery(within: 10, "the carbon of as-2")
        #expect(groupCarbon.messageID == "as-2" && groupCarbon.carbon && groupCarbon.group == "team")
        let groupHistory = try await Self.call(gateway, "GET", "/v1/users/alice/history/group/team")
        #expect((groupHistory.json?["messages"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == ["as-2"], "\(groupHistory.body)")

        // The system sender: to bob only, no stream of its own.
        #expect(try await Self.call(gateway, "POST", "/v1/users/bob/messages", body: #"{"id":"sys-1","text":"maintenance"}"#).status == 202)
        #expect(try await bob.nextDelivery().messageID == "sys-1")
        let systemHistory = try await Self.call(gateway, "GET", "/v1/users/system/history/with/bob")
        #expect((systemHistory.json?["messages"] as? [Any])?.isEmpty == true, "no own copy for the system sender: \(systemHistory.body)")
        await gateway.stop()
        await broker.stop()
    }

    @Test("a removed member keeps what it received while a member and gets nothing sent after the removal: its conversation list ends there, its devices get nothing more, HISTORY of the group is FORBIDDEN")
    func removedMember() async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let carol = try await TestDevice.connect(port: gateway.port)
        try await carol.login(token: try await minter.mint(user: "carol"), device: "phone")
        #expect(try await Self.call(gateway, "POST", "/v1/groups/team", body: #"{"members":["alice","bob","carol"]}"#).status == 201)
        #expect(try await Self.call(gateway, "POST", "/v1/groups/team/messages", body: #"{"id":"g-1","from":"alice","text":"before"}"#).status == 202)
        #expect(try await carol.nextDelivery().messageID == "g-1")
        let removal = try await Self.call(gateway, "DELETE", "/v1/groups/team/members/carol")
        #expect(removal.status == 200 && removal.json?["removed"] as? Bool == true, "\(removal.body)")
        for index in 2...4 {
            #expect(try await Self.call(gateway, "POST", "/v1/groups/team/messages", body: #"{"id":"g-\#(index)","from":"alice","text":"after"}"#).status == 202)
        }
        // A marker after them, to carol herself: everything before it has been delivered.
        #expect(try await Self.call(gateway, "POST", "/v1/users/carol/messages", body: #"{"id":"marker","text":"x"}"#).status == 202)
        #expect(try await carol.nextDelivery().messageID == "marker", "nothing of the group after her removal")

        let list = try await Self.call(gateway, "GET", "/v1/users/carol/conversations")
        let lines = list.json?["conversations"] as? [[String: Any]] ?? []
        let team = lines.first { $0["group"] as? String == "team" }
        #expect((team?["last"] as? [String: Any])?["id"] as? String == "g-1", "the group's newest message for her is the last one before: \(list.body)")
        let history = try await Self.call(gateway, "GET", "/v1/users/carol/history/group/team")
        #expect((history.json?["messages"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == ["g-1"], "\(history.body)")
        // Her device: FORBIDDEN, as for anyone who is not a member now.
        let asked = try await carol.send(.history(HistoryQuery(conversation: .group("team"))))
        let refused = try await carol.nextAck(of: asked)
        #expect(refused.error == .forbidden, "\(refused)")
        await gateway.stop()
        await broker.stop()
    }

    @Test("bad requests are 400 with a JSON error: an invalid user id, a body that is not the schema's")
    func badRequests() async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true)
        let cases: [(String, String, String?)] = [
            ("GET", "/v1/users/a%24b/presence", nil),
            ("POST", "/v1/users/a%2Bb/messages", #"{"id":"m","text":"x"}"#),
            ("POST", "/v1/users/bob/messages", #"{"id":"m","from":"eve#1","text":"x"}"#),
            ("POST", "/v1/users/bob/messages", #"{"id":"","text":"x"}"#),
            ("POST", "/v1/users/bob/messages", #"{"text":"no id"}"#),
            ("POST", "/v1/users/bob/messages", #"{"id":"m","text":"x","extra":1}"#),
            ("POST", "/v1/users/bob/messages", "not json"),
            ("POST", "/v1/users/bob/messages", #"{"id":"m","text":42}"#),
        ]
        for (method, path, body) in cases {
            let answer = try await Self.call(gateway, method, path, body: body)
            #expect(answer.status == 400, "\(method) \(path) \(body ?? ""): \(answer.status) \(answer.body)")
            #expect(answer.json?["error"] is String && answer.json?["message"] is String, "\(answer.body)")
        }
        await gateway.stop()
    }

    @Test("the API's presence matches the devices, whichever gateway they are on", arguments: BrokerKind.allCases)
    func presence(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let east = try await IMGWProcess.start(broker: broker, api: true, archive: .none)
        let west = try await IMGWProcess.start(broker: broker, archive: .none)
        let minter = TokenMinter(secret: IMGWProcess.secret)

        let nobody = try await Self.call(east, "GET", "/v1/users/carol/presence")
        #expect(nobody.status == 200)
        #expect(nobody.json?["online"] as? Bool == false && (nobody.json?["devices"] as? [Any])?.isEmpty == true)
        #expect(nobody.json?["last_seen"] == nil)

        let phone = try await TestDevice.connect(port: west.port)
        try await phone.login(token: try await minter.mint(user: "carol"), device: "phone")
        let tablet = try await TestDevice.connect(port: east.port)
        try await tablet.login(token: try await minter.mint(user: "carol"), device: "tablet")
        try await tablet.send(.logout(Logout()))
        try await tablet.closed()

        // Presence is published right after LOGIN_OK and at logout: ask until both show.
        var devices: [String: String] = [:]
        var answer: ServerAPITests.Answer?
        for _ in 0..<50 where devices != ["phone": "online", "tablet": "offline"] {
            answer = try await Self.call(east, "GET", "/v1/users/carol/presence")
            devices = [:]
            for device in answer?.json?["devices"] as? [[String: Any]] ?? [] {
                devices[device["device"] as? String ?? "?"] = device["status"] as? String
            }
        }
        #expect(devices == ["phone": "online", "tablet": "offline"], "\(answer?.body ?? "")")
        #expect(answer?.json?["online"] as? Bool == true)
        let phoneEntry = (answer?.json?["devices"] as? [[String: Any]])?.first { $0["device"] as? String == "phone" }
        #expect(phoneEntry?["gateway"] is String && phoneEntry?["since"] is Int)
        #expect(answer?.json?["last_seen"] is Int)
        await east.stop()
        await west.stop()
    }

    @Test("a disconnect KICKs the device on another gateway; with revoke_tokens, the old token is refused at the next login on either gateway and a newly issued one works", arguments: BrokerKind.allCases)
    func disconnectAndRevoke(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let east = try await IMGWProcess.start(broker: broker, api: true, archive: .none)
        let west = try await IMGWProcess.start(broker: broker, archive: .none)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let old = try await minter.mint(user: "bob", now: Date() - 5)
        let phone = try await TestDevice.connect(port: west.port)
        try await phone.login(token: old, device: "phone")
        let tablet = try await TestDevice.connect(port: west.port)
        try await tablet.login(token: old, device: "tablet")

        // One device.
        let one = try await Self.call(east, "POST", "/v1/users/bob/disconnect", body: #"{"device":"phone","reason":"lost phone"}"#)
        #expect(one.status == 202 && one.json?["device"] as? String == "phone", "\(one.body)")
        #expect(one.json?["revoked_before"] == nil)
        let (_, kick) = try await phone.next(within: 10, "the phone's KICK")
        #expect(kick == .kick(Kick(reason: .disconnected, message: "lost phone")))
        try await phone.closed()
        let sent = try await Self.call(east, "POST", "/v1/users/bob/messages", body: #"{"id":"still-1","text":"tablet?"}"#)
        #expect(sent.status == 202)
        #expect(try await tablet.nextDelivery().messageID == "still-1", "the tablet stayed")

        // Every device, and the tokens issued so far.
        let all = try await Self.call(east, "POST", "/v1/users/bob/disconnect", body: #"{"reason":"stolen token","revoke_tokens":true}"#)
        #expect(all.status == 202, "\(all.body)")
        let cutoff = try #require(all.json?["revoked_before"] as? Int)
        #expect(abs(Double(cutoff) - Date().timeIntervalSince1970) < 5)
        let (_, tabletKick) = try await tablet.next(within: 10, "the tablet's KICK")
        #expect(tabletKick == .kick(Kick(reason: .disconnected, message: "stolen token")))
        try await tablet.closed()
        // The revocation went out before the disconnect, so both gateways know it by now.
        for gateway in [east, west] {
            let again = try await TestDevice.connect(port: gateway.port)
            try await again.send(.login(LoginRequest(token: old, deviceID: "phone")))
            let notice = try await again.nextError()
            #expect(notice.code == .authFailed && notice.message?.contains("revoked") == true, "\(notice)")
            try await again.closed()
        }
        let fresh = try await TestDevice.connect(port: west.port)
        try await fresh.login(token: try await minter.mint(user: "bob"), device: "phone")
        #expect(fresh.isActive)
        await east.stop()
        await west.stop()
    }

    @Test("imcli admin: send, presence and disconnect --revoke through the API; exit 1 without a key, 2 for a wrong key or a refusal, 3 with no API", arguments: BrokerKind.allCases)
    func imcliAdmin(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let bob = try await TestDevice.connect(port: gateway.port)
        try await bob.login(token: try await minter.mint(user: "bob", now: Date() - 5), device: "phone")
        let url = "http://127.0.0.1:\(gateway.apiPort)"
        func admin(_ arguments: [String], key: String? = IMGWProcess.apiKey) async throws -> (status: Int32, output: String) {
            try await IMClientIntegrationTests.runCLI(["admin"] + arguments + ["--url", url] + (key.map { ["--key", $0] } ?? []))
        }

        let sent = try await admin(["send", "--to", "bob", "--from", "alice", "--id", "cli-1", "hello", "--json"])
        #expect(sent.status == 0, "\(sent.output)")
        #expect(sent.output.contains(#""id":"cli-1""#) && sent.output.contains(#""repeat":false"#), "\(sent.output)")
        let delivery = try await bob.nextDelivery()
        #expect(delivery.messageID == "cli-1" && delivery.from == "alice" && delivery.content.text == "hello")

        let presence = try await admin(["presence", "bob"])
        #expect(presence.status == 0 && presence.output.contains("bob: online") && presence.output.contains("phone online"), "\(presence.output)")

        let disconnected = try await admin(["disconnect", "bob", "--revoke", "--reason", "password changed"])
        #expect(disconnected.status == 0 && disconnected.output.contains("disconnecting every device of bob (password changed); tokens issued before"), "\(disconnected.output)")
        let (_, kick) = try await bob.next(within: 10, "bob's KICK")
        #expect(kick == .kick(Kick(reason: .disconnected, message: "password changed")))

        let noKey = try await admin(["presence", "bob"], key: nil)
        #expect(noKey.status == 1 && noKey.output.contains("IMGW_API_KEY"), "\(noKey.output)")
        let wrongKey = try await admin(["presence", "bob"], key: "not-the-key-0123456789abcdef0123456789")
        #expect(wrongKey.status == 2 && wrongKey.output.contains("401 unauthorized"), "\(wrongKey.output)")
        #expect(!wrongKey.output.contains("not-the-key"), "the key is not repeated")
        let conflict = try await admin(["send", "--to", "bob", "--from", "alice", "--id", "cli-1", "other text"])
        #expect(conflict.status == 2 && conflict.output.contains("409 conflict"), "\(conflict.output)")
        let unreachable = try await IMClientIntegrationTests.runCLI(
            ["admin", "presence", "bob", "--url", "http://127.0.0.1:\(freePort())", "--key", IMGWProcess.apiKey])
        #expect(unreachable.status == 3 && unreachable.output.contains("cannot reach the server API"), "\(unreachable.output)")
        await gateway.stop()
    }

    @Test("behind a load balancer: a repeat of an API message through another gateway is not delivered twice", arguments: BrokerKind.allCases)
    func repeatThroughAnotherGateway(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let east = try await IMGWProcess.start(broker: broker, api: true, archive: .none)
        let west = try await IMGWProcess.start(broker: broker, api: true, archive: .none)
        let bob = try await TestDevice.connect(port: west.port)
        try await bob.login(token: try await TokenMinter(secret: IMGWProcess.secret).mint(user: "bob"), device: "phone")
        let body = #"{"id":"lb-1","from":"alice","text":"once"}"#
        #expect(try await Self.call(east, "POST", "/v1/users/bob/messages", body: body).status == 202)
        #expect(try await bob.nextDelivery().messageID == "lb-1")
        // West did not take the first: it publishes the copy; bob's gateway drops it.
        let again = try await Self.call(west, "POST", "/v1/users/bob/messages", body: body)
        #expect(again.status == 202 && again.json?["repeat"] as? Bool == false, "\(again.body)")
        #expect(try await Self.call(east, "POST", "/v1/users/bob/messages", body: #"{"id":"lb-2","from":"alice","text":"next"}"#).status == 202)
        #expect(try await bob.nextDelivery().messageID == "lb-2", "lb-1 came once")
        await east.stop()
        await west.stop()
    }
}
