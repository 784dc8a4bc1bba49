import Foundation
import IMGateway
import IMWire
import Testing

/// Two ejabberd nodes joined in one cluster (Mnesia), one imgw on each: what a cluster of
/// gateways on a clustered MQTT 5 broker does, and where ejabberd 23.01 falls short.
@Suite("ejabberd cluster: two nodes, one imgw on each", .stopsWhatItStarts, .serialized, .timeLimit(.minutes(3)))
struct EjabberdClusterTests {
    /// The next DELIVERY, skipping (and ACKing) nothing else: receipts and presence are skipped.
    private static func nextDelivery(_ device: TestDevice, _ what: String) async throws -> (IMFrame, ChatDelivery) {
        while true {
            let (frame, message) = try await device.next(within: 10, what)
            if case .delivery(let delivery) = message { return (frame, delivery) }
        }
    }

    @Test("chat between devices on different nodes, both ways; an offline queue made on one node follows the user to the other")
    func crossNode() async throws {
        let nodes = try await TestEjabberd.cluster(2)
        let gatewayA = try await IMGWProcess.start(broker: nodes[0])
        let gatewayB = try await IMGWProcess.start(broker: nodes[1])

        // Live, across nodes.
        let alice = try await gatewayA.device("alice")
        let bob = try await gatewayB.device("bob")
        #expect(try await alice.chat(to: "bob", id: "live-1", text: "hello from node 1").error == nil)
        let (frame, delivery) = try await Self.nextDelivery(bob, "bob's delivery on node 2")
        #expect(delivery.messageID == "live-1")
        try await bob.ack(frame)
        #expect(try await bob.chat(to: "alice", id: "live-2", text: "hello from node 2").error == nil)
        let (backFrame, back) = try await Self.nextDelivery(alice, "alice's delivery on node 1")
        #expect(back.messageID == "live-2")
        try await alice.ack(backFrame)

        // bob leaves from node 2; alice writes on node 1; bob comes back on node 1.
        try await bob.send(.logout(Logout()))
        _ = try await bob.next(within: 10, "the LOGOUT ack")
        for index in 0..<3 {
            #expect(try await alice.chat(to: "bob", id: "o-\(index)", text: "while you were away \(index)").error == nil)
        }
        let again = try await gatewayA.device("bob")
        for index in 0..<3 {
            let (queued, message) = try await Self.nextDelivery(again, "queued message \(index)")
            #expect(message.messageID == "o-\(index)")
            try await again.ack(queued)
        }
        await gatewayA.stop()
        await gatewayB.stop()
    }

    @Test("presence across nodes: a live change reaches a watcher on the other node; the retained snapshot of a user online on the other node does not (ejabberd 23.01 keeps retained messages per node; imgw does not compensate yet)")
    func presenceAcrossNodes() async throws {
        let nodes = try await TestEjabberd.cluster(2)
        let gatewayA = try await IMGWProcess.start(broker: nodes[0])
        let gatewayB = try await IMGWProcess.start(broker: nodes[1])
        let dave = try await gatewayA.device("dave")
        let erin = try await gatewayB.device("erin")
        let carol = try await gatewayB.device("carol")
        // dave's watch, then erin's (online on carol's node): a broker sends the retained
        // messages of a subscription before it handles the session's next SUBSCRIBE, so erin's
        // presence coming first means dave's never came (checked on one node of either broker).
        let watchDave = try await carol.send(.presenceWatch(PresenceWatch(users: ["dave"])))
        var seen: [PresenceNotice] = []
        while true {
            let (_, message) = try await carol.next(within: 10, "the ACK of dave's watch")
            if case .presence(let notice) = message { seen.append(notice) }
            if case .ack(let ack) = message, ack.sequence == watchDave { break }
        }
        try await carol.send(.presenceWatch(PresenceWatch(users: ["erin"])))
        let first = if let early = seen.first { early } else { try await Self.nextPresence(carol, "the first retained presence") }
        withKnownIssue("ejabberd 23.01: a retained message published through node 1 is not sent to a new subscription on node 2") {
            #expect(first.user == "dave", "the first presence carol got was \(first.user)'s")
        }
        _ = erin
        // The subscription is in place: dave's going offline (his will, published by node 1)
        // reaches carol on node 2 live.
        await dave.drop()
        let offline = try await Self.nextPresence(carol, "dave going offline")
        #expect(offline.user == "dave")
        #expect(offline.status == .offline)
        await gatewayA.stop()
        await gatewayB.stop()
    }

    /// The next PRESENCE notice, skipping other frames.
    private static func nextPresence(_ device: TestDevice, _ what: String, within seconds: Double = 10) async throws -> PresenceNotice {
        while true {
            let (_, message) = try await device.next(within: seconds, what)
            if case .presence(let notice) = message { return notice }
        }
    }
}
