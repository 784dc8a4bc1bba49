import IMWire
import Testing
import IMTestSupport

/// PROTOCOL.md 6.3 and 6.5: "delivered" and "read" notices to the sender's devices, and the
/// per-device opt-out at LOGIN (RECEIPT_NOTICES = 0).
@Suite("Gateway: receipt notices and their opt-out", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct ReceiptNoticeTests {
    @Test("a device that logged in with RECEIPT_NOTICES = 0 gets no notices; its user's other device gets both; its own read receipts still work")
    func optOut() async throws {
        let gateway = try await TestGateway.start()
        let tablet = try await gateway.device("alice", device: "tablet")
        let watch = try await TestDevice.connect(port: gateway.port)
        try await watch.send(.login(LoginRequest(token: try await gateway.minter.mint(user: "alice"), deviceID: "watch", receiptNotices: false)))
        guard case (_, .loginOK) = try await watch.next(within: 10, "LOGIN_OK") else {
            Issue.record("expected LOGIN_OK")
            return
        }
        let bob = try await gateway.device("bob", device: "phone")

        #expect(try await tablet.chat(to: "bob", id: "rn-1", text: "tick?").error == nil)
        while true {
            let (frame, message) = try await bob.next(within: 10, "the delivery")
            if case .delivery = message {
                try await bob.ack(frame)
                break
            }
        }
        // Read, then a reply: bob's gateway publishes "delivered" before "read" (6.5), and both
        // before the reply, so each of alice's devices has had both notices by the reply.
        let read = try await bob.send(.readReceipt(ReadReceipt(to: "alice", messageID: "rn-1")))
        try await nextAck(bob, of: read)
        #expect(try await bob.chat(to: "alice", id: "rn-reply", text: "tock").error == nil)

        // The default device: both notices (queued behind chat, so the reply may come first).
        var kinds: [IMReceiptKind] = []
        var replied = false
        while kinds.count < 2 || !replied {
            let (frame, message) = try await tablet.next(within: 10, "the tablet's notices and the reply")
            switch message {
            case .receiptNotice(let notice):
                #expect(notice.from == "bob" && notice.messageID == "rn-1")
                kinds.append(notice.kind)
                try await tablet.ack(frame)
            case .delivery(let reply):
                #expect(reply.messageID == "rn-reply")
                replied = true
                try await tablet.ack(frame)
            default:
                break
            }
        }
        #expect(kinds == [.delivered, .read])

        // The watch: the carbon of what the tablet sent, the reply, and then a heartbeat's ACK,
        // which the gateway writes after anything it had queued with the reply. No notice may
        // come before it.
        var seen: [IMMessage] = []
        while !seen.contains(where: { if case .delivery(let delivery) = $0 { delivery.messageID == "rn-reply" } else { false } }) {
            let (frame, message) = try await watch.next(within: 10, "the watch's copy of the reply")
            seen.append(message)
            if case .delivery = message { try await watch.ack(frame) }
        }
        let heartbeat = try await watch.send(.heartbeat)
        while true {
            let (_, message) = try await watch.next(within: 10, "the heartbeat's ACK")
            seen.append(message)
            if case .ack(let ack) = message, ack.sequence == heartbeat { break }
        }
        #expect(!seen.contains { if case .receiptNotice = $0 { true } else { false } }, "\(seen)")

        // What the watch sends is not affected: its read receipt reaches bob.
        let watchRead = try await watch.send(.readReceipt(ReadReceipt(to: "bob", messageID: "rn-reply")))
        try await nextAck(watch, of: watchRead)
        var notice: ReceiptNotice?
        while notice == nil {
            let (frame, message) = try await bob.next(within: 10, "bob's notices")
            if case .receiptNotice(let seen) = message {
                try await bob.ack(frame)
                if seen.kind == .read { notice = seen }
            }
        }
        #expect(notice?.from == "alice" && notice?.messageID == "rn-reply")
        await gateway.stop()
    }

    /// Waits for the positive ACK of `sequence`, skipping other frames.
    private func nextAck(_ device: TestDevice, of sequence: UInt32) async throws {
        while true {
            let (_, message) = try await device.next(within: 10, "the ACK of \(sequence)")
            if case .ack(let ack) = message, ack.sequence == sequence {
                #expect(ack.error == nil)
                return
            }
        }
    }
}
