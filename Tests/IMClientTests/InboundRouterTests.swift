import IMWire
import NIOCore
import Testing

@testable import IMClient

@Suite("InboundRouter: what the client does with each frame")
struct InboundRouterTests {
    let now: UInt32 = 1_700_000_000

    func frame(_ message: IMMessage, sequence: UInt32 = 5) -> IMFrame {
        message.frame(sequence: sequence, timestamp: now, sessionID: 1)
    }

    func loggedIn() -> InboundRouter {
        var router = InboundRouter(dedupWindow: 16)
        _ = router.react(to: frame(.loginOK(LoginOK(userID: "bob"))), timestamp: now)
        return router
    }

    @Test("before login: heartbeats are answered, LOGIN_OK logs in, ERROR refuses, the rest waits")
    func login() {
        var router = InboundRouter()
        let beat = IMFrame.heartbeat(sequence: 9, timestamp: now, sessionID: 1)
        let actions1 = router.react(to: beat, timestamp: now)
        #expect(actions1 == [.reply(beat.ack(timestamp: now))])
        let actions2 = router.react(to: frame(.ack(Ack(sequence: 1))), timestamp: now)
        #expect(actions2 == [])
        let actions3 = router.react(to: frame(.error(ErrorNotice(code: .authFailed, message: "bad"))), timestamp: now)
        #expect(actions3
            == [.loginRefused(.authFailed, "bad")])
        let ok = LoginOK(userID: "bob", deviceID: "cli", heartbeatInterval: 30)
        let actions4 = router.react(to: frame(.loginOK(ok)), timestamp: now)
        #expect(actions4 == [.loggedIn(ok)])
        #expect(router.isLoggedIn)
    }

    @Test("a delivery is surfaced then ACKed; its redelivery is only ACKed")
    func deliveryDedup() {
        var router = loggedIn()
        let delivery = ChatDelivery(from: "alice", messageID: "m-1", serverTime: 1_700_000_000_123, content: .text("hi"))
        let first = frame(.delivery(delivery), sequence: 10)
        let message = IMClient.Message(from: "alice", messageID: "m-1", content: .text("hi"), serverTime: 1_700_000_000_123)
        let actions5 = router.react(to: first, timestamp: now)
        #expect(actions5 == [.emit(.message(message)), .reply(first.ack(timestamp: now))])

        var again = delivery
        again.resend = true
        let second = frame(.delivery(again), sequence: 11)
        let actions6 = router.react(to: second, timestamp: now)
        #expect(actions6 == [.reply(second.ack(timestamp: now))])
    }

    @Test("ACKs settle requests; receipts are surfaced and ACKed; presence and kicks are surfaced")
    func others() {
        var router = loggedIn()
        let ack = Ack(sequence: 4, messageID: "m-9", serverTime: 1)
        let actions7 = router.react(to: frame(.ack(ack)), timestamp: now)
        #expect(actions7 == [.settle(ack)])

        let notice = ReceiptNotice(from: "bob", messageID: "m-9", kind: .read, serverTime: 2)
        let receipt = frame(.receiptNotice(notice), sequence: 12)
        let actions8 = router.react(to: receipt, timestamp: now)
        #expect(actions8
            == [.emit(.receipt(IMClient.Receipt(from: "bob", messageID: "m-9", kind: .read, serverTime: 2))), .reply(receipt.ack(timestamp: now))])

        let presence = PresenceNotice(user: "carol", device: "phone", status: .offline, lastSeen: 3)
        let actions9 = router.react(to: frame(.presence(presence)), timestamp: now)
        #expect(actions9
            == [.emit(.presence(IMClient.Presence(user: "carol", device: "phone", status: .offline, lastSeen: 3)))])

        let actions10 = router.react(to: frame(.kick(Kick(reason: .sessionTakenOver, message: "elsewhere"))), timestamp: now)
        #expect(actions10
            == [.emit(.kicked(.sessionTakenOver, "elsewhere"))])
    }

    @Test("an unreadable DATA frame gets a negative ACK; an unreadable CONTROL frame nothing")
    func unreadable() {
        var router = loggedIn()
        var writer = TLVWriter()
        writer.write(.from, string: "alice")  // no MESSAGE_ID, no content
        let data = IMFrame(type: .data, sequence: 20, timestamp: now, sessionID: 1, body: writer.buffer)
        let actions = router.react(to: data, timestamp: now)
        guard case .reply(let reply)? = actions.first, actions.count == 1,
              case .ack(let ack)? = try? IMMessage(frame: reply)
        else {
            Issue.record("expected one negative ACK, got \(actions)")
            return
        }
        #expect(ack.sequence == 20)
        #expect(ack.error == .badRequest)

        var control = TLVWriter()
        control.write(.operation, integer: UInt16(0x7777))
        let actions11 = router.react(to: IMFrame(type: .control, sequence: 21, timestamp: now, sessionID: 1, body: control.buffer), timestamp: now)
        #expect(actions11 == [])
    }
}
