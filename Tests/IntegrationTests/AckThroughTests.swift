import Mosquitto
import Testing
import IMTestSupport

/// "Ack-through": holding a client's writes keeps the PUBACK of a received QoS 1
/// message from leaving, so the broker still owns the message if the process dies
/// before the application is done with it (../shared/notes/libmosquitto.md).
@Suite("Manual acknowledgement (ack-through)", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct AckThroughTests {
    private func persistent(_ broker: TestBroker, _ id: String, _ acknowledgement: MosquittoClient.Acknowledgement) -> MosquittoClient {
        makeClient(broker, id: id) {
            $0.cleanStart = false
            $0.sessionExpiryInterval = 600
            $0.acknowledgement = acknowledgement
        }
    }

    @Test("an unacknowledged QoS 1 message is redelivered (DUP) after a crash; an acknowledged one is not")
    func redeliveredUntilAcknowledged() async throws {
        let broker = try await TestBroker.start()
        let sender = makeClient(broker)
        try await sender.connect()
        let id = "holder-\(UInt32.random(in: 0...UInt32.max))"

        let first = persistent(broker, id, .manual)
        let firstInbox = try await connected(first)
        try await first.subscribe("inbox/holder", qos: .atLeastOnce)
        try await sender.publish(topic: "inbox/holder", string: "m1", qos: .atLeastOnce)
        let m1 = try await firstInbox.next(within: 10, "m1")
        #expect(m1.payloadString == "m1")
        #expect(m1.dup == false)
        #expect(await first.unacknowledgedCount == 1)
        // Our own publish queues behind the held PUBACK: it must not complete yet.
        let ticket = try await first.startPublish(topic: "probe", payload: Array("x".utf8), qos: .atLeastOnce)
        let blocked = Task { try await first.completion(of: ticket) }
        await first.abort()  // what kill -9 does: the socket closes, nothing queued leaves
        // A QoS 1 publish in flight when the connection drops waits for the next one
        // (libmosquitto resends it then): only closing the client fails it. (The test used
        // to await it right after abort(), and hung whenever the publish was handed over
        // first.)
        #expect(await first.inflightPublishes == 1)
        await first.close()
        await #expect(throws: MosquittoError.closed) { try await blocked.value }

        let second = persistent(broker, id, .manual)
        let secondInbox = Collector(second.messages)
        #expect(try await second.connect().sessionPresent)
        let again = try await secondInbox.next(within: 10, "the redelivered m1")
        #expect(again.payloadString == "m1")
        #expect(again.dup == MosquittoLibrary.internals.contains(.dupFlag), "a redelivery carries the DUP flag (read through libmosquitto's internals)")
        await second.acknowledge(again)
        try await sender.publish(topic: "inbox/holder", string: "m2", qos: .atLeastOnce)
        let m2 = try await secondInbox.next(within: 10, "m2")
        #expect(m2.payloadString == "m2")
        await second.acknowledge(m2)
        #expect(await second.unacknowledgedCount == 0)
        // The out-queue is FIFO: once this publish is acknowledged the PUBACKs queued
        // before it have left.
        try await second.publish(topic: "probe", string: "after", qos: .atLeastOnce)
        await second.abort()
        await second.close()

        let third = persistent(broker, id, .manual)
        let thirdInbox = Collector(third.messages)
        try await third.connect()
        try await sender.publish(topic: "inbox/holder", string: "marker", qos: .atLeastOnce)
        let next = try await thirdInbox.next(within: 10, "the marker")
        #expect(next.payloadString == "marker", "acknowledged messages must not come back")
        await third.close()
        await sender.close()
    }

    @Test("without manual acknowledgement the same crash loses the message (why ack-through exists)")
    func automaticLosesOnCrash() async throws {
        let broker = try await TestBroker.start()
        let sender = makeClient(broker)
        try await sender.connect()
        let id = "auto-\(UInt32.random(in: 0...UInt32.max))"

        let first = persistent(broker, id, .automatic)
        let inbox = try await connected(first)
        try await first.subscribe("inbox/auto", qos: .atLeastOnce)
        try await sender.publish(topic: "inbox/auto", string: "m1", qos: .atLeastOnce)
        #expect(try await inbox.next().payloadString == "m1")
        await first.abort()
        await first.close()

        let second = persistent(broker, id, .automatic)
        let secondInbox = Collector(second.messages)
        try await second.connect()
        try await sender.publish(topic: "inbox/auto", string: "marker", qos: .atLeastOnce)
        #expect(try await secondInbox.next().payloadString == "marker")
        await second.close()
        await sender.close()
    }
}
