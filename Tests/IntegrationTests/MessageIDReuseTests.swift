import IMWire
import Testing
import IMTestSupport

/// PROTOCOL.md 6.3: the gateway's window of accepted message ids, per sending user.
@Suite("Gateway: message ids, resends and reuse", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct MessageIDReuseTests {
    @Test("same id and content: ACKed as the original, delivered once; same id, other content: MESSAGE_ID_REUSED, not delivered, from any device of the user")
    func resendAndReuse() async throws {
        let gateway = try await TestGateway.start()
        let phone = try await gateway.device("alice", device: "phone")
        let tablet = try await gateway.device("alice", device: "tablet")
        let bob = try await gateway.device("bob", device: "phone")

        let first = try await phone.chat(to: "bob", id: "re-1", text: "hello")
        let resend = try await phone.chat(to: "bob", id: "re-1", text: "hello", resend: true)
        #expect(first.error == nil && resend.error == nil)
        #expect(resend.serverTime == first.serverTime, "the resend is ACKed as the original")

        let reused = try await phone.chat(to: "bob", id: "re-1", text: "something else")
        #expect(reused.error == .messageIDReused)
        #expect(reused.errorMessage?.contains("re-1") == true)
        #expect(reused.serverTime == nil && reused.messageID == nil, "a refusal, not an acceptance")
        // RESEND does not make another message a resend.
        #expect(try await phone.chat(to: "bob", id: "re-1", text: "something else", resend: true).error == .messageIDReused)
        // The window is the user's, not the device's.
        #expect(try await tablet.chat(to: "bob", id: "re-1", text: "from the tablet").error == .messageIDReused)

        // Both connections are still usable. Each device's messages reach bob in the order it
        // sent them, so a refused message that had been published would arrive before these.
        #expect(try await phone.chat(to: "bob", id: "re-2", text: "phone after").error == nil)
        #expect(try await tablet.chat(to: "bob", id: "re-3", text: "tablet after").error == nil)
        var received: [(id: String, text: String?)] = []
        while !(received.contains { $0.id == "re-2" } && received.contains { $0.id == "re-3" }) {
            let (frame, message) = try await bob.next(within: 10, "bob's deliveries")
            if case .delivery(let delivery) = message {
                received.append((delivery.messageID, delivery.content.text))
                try await bob.ack(frame)
            }
        }
        #expect(received.filter { $0.id == "re-1" }.map(\.text) == ["hello"], "re-1 once, with its first content")
        #expect(received.count == 3, "\(received)")
        await gateway.stop()
    }
}
