@testable import IMGateway
import Mosquitto
import Testing

@Suite("StatsPublisher")
struct StatsPublisherTests {
    static func snapshot(instance: String?, retained: Bool = false) -> MosquittoMessage {
        let payload = StatsPayload(
            gateway: "gw-1", ts: 1, connections: 0, loggedIn: 0, sessions: 0, messagesIn: 0, messagesOut: 0, uptimeSeconds: 1,
            instance: instance)
        return MosquittoMessage(topic: "im/$gateway/gw-1/stats", payload: PayloadCodec.encode(payload), retain: retained)
    }

    @Test("another process's live snapshot names it; its own, a retained one, one without an instance and garbage do not")
    func otherInstance() {
        #expect(StatsPublisher.otherInstance(in: Self.snapshot(instance: "b"), besides: "a") == "b")
        #expect(StatsPublisher.otherInstance(in: Self.snapshot(instance: "a"), besides: "a") == nil)
        #expect(StatsPublisher.otherInstance(in: Self.snapshot(instance: "b", retained: true), besides: "a") == nil)
        #expect(StatsPublisher.otherInstance(in: Self.snapshot(instance: nil), besides: "a") == nil)
        #expect(StatsPublisher.otherInstance(in: MosquittoMessage(topic: "im/$gateway/gw-1/stats", payload: Array("{".utf8)), besides: "a") == nil)
    }
}
