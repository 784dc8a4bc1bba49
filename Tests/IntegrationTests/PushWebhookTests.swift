import Foundation
import IMGateway
import IMWire
import Testing
import IMTestSupport

/// The offline-push webhook of real imgw processes on a real broker, POSTing to a real HTTP
/// receiver in the test process.
@Suite("Offline push webhook", .serialized, .stopsWhatItStarts, .startsEjabberdNodes)
struct PushWebhookTests {
    static let ready = "offline push ready"

    @Test("fires once, within a second, for a user with no device online; the body is the message's, the signature verifies; the chat waits for his login", arguments: BrokerKind.allCases)
    func offlineRecipient(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let receiver = try await WebhookReceiver.start()
        let gateway = try await IMGWProcess.start(broker: broker, push: receiver.url, until: Self.ready)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        // Bob has logged in before, so his session keeps what comes while he is away.
        let bob = try await TestDevice.connect(port: gateway.port)
        try await bob.login(token: try await minter.mint(user: "bob"), device: "phone")
        try await bob.send(.logout(Logout()))
        try await bob.closed()
        let alice = try await TestDevice.connect(port: gateway.port)
        try await alice.login(token: try await minter.mint(user: "alice"), device: "phone")

        _ = try await alice.chat(to: "bob", id: "m-1", text: "are you there?")
        let accepted = ContinuousClock.now
        let request = try await receiver.next(within: 5)
        #expect(request.arrived - accepted < .seconds(1), "within 1 s of the ACK: \(request.arrived - accepted)")
        let json = request.json
        #expect(json["event"] as? String == "chat" && json["to"] as? String == "bob" && json["from"] as? String == "alice")
        #expect(json["id"] as? String == "m-1" && json["type"] as? String == "text")
        #expect(json["preview"] == nil, "preview: none is the default")
        #expect((json["ts"] as? Int ?? 0) > 1_700_000_000_000)
        #expect(request.headers["content-type"] == "application/json" && request.headers["x-imgw-attempt"] == "1")
        #expect(request.signatureVerifies(secret: IMGWProcess.pushSecret), "\(request.headers)")
        #expect(!request.signatureVerifies(secret: "another-secret-0123456789abcdef0123456789"))
        // AsyncHTTPClient keeps the connection to the receiver open: close-on-exec like the rest.
        let pid = gateway.process.pid
        let sockets = ProcessDescriptors.links(of: pid).filter { $0.fd > 2 && $0.target.hasPrefix("socket:") }
        let leaking = sockets.filter { ProcessDescriptors.isCloseOnExec($0.fd, of: pid) == false }  // nil: closed meanwhile
        #expect(leaking.isEmpty, "not close-on-exec: \(leaking)")

        let back = try await TestDevice.connect(port: gateway.port)
        try await back.login(token: try await minter.mint(user: "bob"), device: "phone")
        let delivery = try await back.nextDelivery()
        #expect(delivery.messageID == "m-1" && delivery.content.text == "are you there?")
        #expect(try await gateway.metric("imgw_push_delivered_total") == 1)
        #expect(await receiver.pending.isEmpty, "once")
    }

    @Test("never for a user with a device online, on this gateway or another, even right after his login", arguments: BrokerKind.allCases)
    func onlineRecipient(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let receiver = try await WebhookReceiver.start()
        let gateway = try await IMGWProcess.start(broker: broker, push: receiver.url, archive: .none, until: Self.ready)
        let other = try await IMGWProcess.start(broker: broker, archive: .none)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let alice = try await TestDevice.connect(port: gateway.port)
        try await alice.login(token: try await minter.mint(user: "alice"), device: "phone")
        let carol = try await TestDevice.connect(port: other.port)
        try await carol.login(token: try await minter.mint(user: "carol"), device: "tablet")
        let erin = try await TestDevice.connect(port: gateway.port)
        try await erin.login(token: try await minter.mint(user: "erin"), device: "phone")

        // At once after the logins: their presence is on its way while the chats are.
        _ = try await alice.chat(to: "carol", id: "c-1", text: "hi carol")
        _ = try await alice.chat(to: "erin", id: "e-1", text: "hi erin")
        #expect(try await carol.nextDelivery().messageID == "c-1")
        #expect(try await erin.nextDelivery().messageID == "e-1")
        // A chat for someone offline afterwards: the first request must be his.
        _ = try await alice.chat(to: "dave", id: "d-1", text: "hi dave")
        let request = try await receiver.next(within: 5)
        #expect(request.json["to"] as? String == "dave" && request.json["id"] as? String == "d-1", "\(request.json)")
        #expect(await receiver.pending.isEmpty)
        // Whether each was skipped at once or after the delay depends on when the presence
        // came: at most two were queued and then dropped for an online recipient.
        #expect(try await gateway.metric("imgw_push_suppressed_total") <= 2)
        #expect(try await gateway.metric("imgw_push_delivered_total") == 1)
    }

    @Test("retried after a 500, with the same body and the attempt counted; metrics count the retry", arguments: BrokerKind.allCases)
    func retriedAfter500(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let receiver = try await WebhookReceiver.start(answers: [500, 503])
        let gateway = try await IMGWProcess.start(broker: broker, push: receiver.url, until: Self.ready)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let alice = try await TestDevice.connect(port: gateway.port)
        try await alice.login(token: try await minter.mint(user: "alice"), device: "phone")
        _ = try await alice.chat(to: "bob", id: "r-1", text: "retry me")

        let first = try await receiver.next(within: 5)
        let second = try await receiver.next(within: 5)
        let third = try await receiver.next(within: 8)
        #expect([first, second, third].map { $0.headers["x-imgw-attempt"] } == ["1", "2", "3"])
        #expect(first.body == second.body && second.body == third.body)
        #expect([first, second, third].allSatisfy { $0.signatureVerifies(secret: IMGWProcess.pushSecret) })
        #expect(second.arrived - first.arrived >= .milliseconds(900), "backoff of 1 s: \(second.arrived - first.arrived)")
        #expect(third.arrived - second.arrived >= .milliseconds(1900), "then 2 s: \(third.arrived - second.arrived)")
        // The third answer (200) is counted once the POST has returned.
        _ = try await alice.chat(to: "dave", id: "d-1", text: "after")
        #expect(try await receiver.next(within: 5).json["id"] as? String == "d-1")
        #expect(try await gateway.metric("imgw_push_retries_total") == 2)
        #expect(try await gateway.metric("imgw_push_delivered_total") >= 1)
        #expect(try await gateway.metric("imgw_push_failed_total") == 0)
    }

    @Test("at most once per message with several gateways: the gateway that accepted the chat, from a device or the API, is the one that notifies", arguments: BrokerKind.allCases)
    func severalGateways(on kind: BrokerKind) async throws {
        let broker = try await kind.start()
        let receiver = try await WebhookReceiver.start()
        let east = try await IMGWProcess.start(broker: broker, api: true, push: receiver.url, archive: .none, until: Self.ready)
        let west = try await IMGWProcess.start(broker: broker, push: receiver.url, archive: .none, until: Self.ready)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let alice = try await TestDevice.connect(port: west.port)
        try await alice.login(token: try await minter.mint(user: "alice"), device: "phone")

        let fromAlice = (1...5).map { "a-\($0)" }
        for id in fromAlice { _ = try await alice.chat(to: "bob", id: id, text: "message \(id)") }
        let fromAPI = (1...5).map { "api-\($0)" }
        for id in fromAPI {
            let answer = try await ServerAPITests.call(east, "POST", "/v1/users/bob/messages", body: #"{"id":"\#(id)","text":"from the backend"}"#)
            #expect(answer.status == 202, "\(answer.body)")
        }
        var received: [String: String] = [:]
        for _ in 0..<10 {
            let json = try await receiver.next(within: 5).json
            received[json["id"] as? String ?? "?"] = json["from"] as? String
        }
        #expect(received.keys.sorted() == (fromAlice + fromAPI).sorted())
        #expect(fromAPI.allSatisfy { received[$0] == "system" } && fromAlice.allSatisfy { received[$0] == "alice" })
        let delivered = (try await east.metric("imgw_push_delivered_total"), try await west.metric("imgw_push_delivered_total"))
        let queued = (try await east.metric("imgw_push_queued"), try await west.metric("imgw_push_queued"))
        #expect(delivered == (5, 5), "each gateway notified what it accepted, once: \(delivered)")
        #expect(queued == (0, 0), "and none is about to send another: \(queued)")
        #expect(await receiver.pending.isEmpty)
    }
}
