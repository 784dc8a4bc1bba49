@testable import IMGateway
import IMArchive
import IMWire
import Mosquitto
import NIOCore
import Testing

/// The data path of ``ConnectionStateMachine``, driven by frames and mail without sockets, on a
/// simulated clock: chats to ``ChatAcceptance`` and their ACKs, group chats waiting for their
/// members, deliveries and their ACKs, receipts, mail before LOGIN_OK, backpressure; and the
/// pure parts (``Uplink``, ``DeviceRateLimits``).
@Suite("ConnectionStateMachine's data path")
struct ConnectionStateMachineDataPathTests {
    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)
    static func at(_ seconds: Int64) -> NIODeadline { start + .seconds(seconds) }
    static func ms(_ milliseconds: Int64) -> NIODeadline { start + .milliseconds(milliseconds) }
    static func origin(_ from: String, _ id: String) -> PendingDeliveries.Origin { .init(from: from, messageID: id) }

    /// The chats an event handed to ``ChatAcceptance``.
    static func accepted(_ actions: [ConnectionAction]) -> [PendingChat] {
        actions.flatMap { action -> [PendingChat] in if case .accept(let chats) = action { chats } else { [] } }
    }

    static func accepted(_ chat: PendingChat, offset: UInt64? = nil, done: [UInt64] = []) -> ConnectionMailbox.Mail {
        .chatAnswered(chat.ticket, .accepted(.init(serverTime: 1_234, ownOffset: offset, done: done, isRepeat: false, copies: 1)))
    }

    // MARK: Chat

    @Test("a chat goes to ChatAcceptance at the end of its read burst, as this device's and user's; its verdict becomes the ACK, with its offset")
    func chatAccepted() {
        var harness = MachineHarness()
        _ = harness.logIn()
        let frame = harness.frame(.chat(ChatSend(to: "bob", messageID: "m-1", content: .text("hi"))))
        #expect(harness.machine.handle(.frame(frame)).lines == [], "gathered until the burst ends")
        let chats = Self.accepted(harness.machine.handle(.readComplete))
        #expect(chats.map(\.ticket.messageID) == ["m-1"])
        let chat = chats[0].chat
        #expect(chat.from == "alice" && chat.device == "phone" && chat.recipients == ["bob"])
        #expect(!chat.carbon, "no other device of alice is known: no carbon")
        #expect(chat.serverTime == harness.clock.wallMilliseconds, "the server time is the connection's clock's")
        #expect(chats[0].ticket.startedAt == harness.clock.now)
        harness.clock.advance(by: .milliseconds(3))
        #expect(harness.mail(Self.accepted(chats[0], offset: 41)).lines == ["write ACK #2 offset=41"])
        #expect(harness.statistics.messagesIn == 1)
    }

    @Test("chat verdicts: MESSAGE_ID_REUSED, BROKER_UNAVAILABLE; STORE_UNAVAILABLE holds every later chat until the refused one comes again")
    func chatRefused() {
        var harness = MachineHarness()
        _ = harness.logIn()
        let first = Self.accepted(harness.send(.chat(ChatSend(to: "bob", messageID: "m-1", content: .text("1")))))
        let second = Self.accepted(harness.send(.chat(ChatSend(to: "bob", messageID: "m-2", content: .text("2")))))
        let third = Self.accepted(harness.send(.chat(ChatSend(to: "bob", messageID: "m-3", content: .text("3")))))
        #expect(harness.mail(.chatAnswered(first[0].ticket, .reused)).lines == ["write ACK #2 MESSAGE_ID_REUSED"])
        #expect(harness.mail(.chatAnswered(second[0].ticket, .notPublished("down"))).lines == ["write ACK #3 BROKER_UNAVAILABLE"])
        #expect(harness.mail(.chatAnswered(third[0].ticket, .storeUnavailable(retryAfter: 1_000, message: "disk full"))).lines == ["write ACK #4 STORE_UNAVAILABLE"])
        #expect(harness.send(.chat(ChatSend(to: "bob", messageID: "m-4", content: .text("4")))).lines == ["write ACK #5 STORE_UNAVAILABLE"], "held")
        harness.clock.advance(by: .seconds(1))
        let again = Self.accepted(harness.send(.chat(ChatSend(to: "bob", messageID: "m-3", content: .text("3"), resend: true))))
        #expect(again.map(\.ticket.messageID) == ["m-3"], "the refused one, again, goes")
    }

    @Test("chats invalid or above the broker's QoS are refused at once and go nowhere")
    func chatChecked() {
        var harness = MachineHarness()
        _ = harness.logIn()
        #expect(harness.send(.chat(ChatSend(to: "bob/x", messageID: "m-1", content: .text("1")))).lines == ["write ACK #2 INVALID_USER_ID"])
        #expect(harness.send(.chat(ChatSend(group: "g#1", messageID: "m-2", content: .text("2")))).lines == ["write ACK #3 INVALID_USER_ID"])
        #expect(harness.send(.chat(ChatSend(to: "bob", messageID: "", content: .text("3")))).lines.first?.hasPrefix("write ACK #4 BAD_REQUEST") == true)
    }

    @Test("at most max_inflight chats are handed over and not answered; each answer lets the next go, in order")
    func inFlight() {
        var harness = MachineHarness()
        _ = harness.logIn()
        var handed: [PendingChat] = []
        for index in 1...6 { handed += Self.accepted(harness.send(.chat(ChatSend(to: "bob", messageID: "m-\(index)", content: .text("x"))))) }
        #expect(handed.map(\.ticket.messageID) == ["m-1", "m-2", "m-3", "m-4"], "4 (the limits' max_inflight)")
        #expect(Self.accepted(harness.mail(Self.accepted(handed[0]))).map(\.ticket.messageID) == ["m-5"])
    }

    @Test("a group chat waits for its members, and the chats behind it wait for it: they go in the order the device sent them")
    func groupChatOrder() {
        var harness = MachineHarness()
        _ = harness.logIn()
        let group = harness.send(.chat(ChatSend(group: "team", messageID: "g-1", content: .text("all"))))
        #expect(group.lines == ["lookUpGroup team"])
        #expect(harness.send(.chat(ChatSend(to: "bob", messageID: "m-1", content: .text("after")))).lines == [], "behind the group chat")
        let members: [String: UInt64] = ["alice": 1, "bob": 1, "carol": 1]
        let resolved = Self.accepted(harness.mail(.groupResolved("team", .success(members))))
        #expect(resolved.map(\.ticket.messageID) == ["g-1", "m-1"])
        #expect(resolved.first?.chat.recipients == ["bob", "carol"], "every other member")
    }

    @Test("a group chat of a user who is not a member: FORBIDDEN; members that cannot be read: STORE_UNAVAILABLE or BROKER_UNAVAILABLE")
    func groupChatRefused() {
        var harness = MachineHarness()
        _ = harness.logIn()
        harness.send(.chat(ChatSend(group: "team", messageID: "g-1", content: .text("1"))))
        #expect(harness.mail(.groupResolved("team", .success(["bob": 1]))).lines == ["write ACK #2 FORBIDDEN"])
        harness.send(.chat(ChatSend(group: "other", messageID: "g-2", content: .text("2"))))
        #expect(harness.mail(.groupResolved("other", .failure(ArchiveError.unavailable("down", retryAfter: 500)))).lines == ["write ACK #3 STORE_UNAVAILABLE"])
    }

    @Test("a group chat whose members come after the connection closed is handed over all the same (the gateway's own session publishes it)")
    func groupChatAfterClose() {
        var harness = MachineHarness()
        _ = harness.logIn()
        harness.send(.chat(ChatSend(group: "team", messageID: "g-1", content: .text("1"))))
        #expect(harness.machine.handle(.channelClosed).lines == ["endSession connectionLost"])
        #expect(Self.accepted(harness.mail(.groupResolved("team", .success(["alice": 1, "bob": 1])))).map(\.ticket.messageID) == ["g-1"])
    }

    @Test("a connection that closes hands over the chats it took, and flushes acknowledgements and receipts, before its session ends")
    func closingHandsOver() {
        var limits = MachineHarness.limits
        limits.maxInFlight = 1
        var harness = MachineHarness(limits: limits)
        _ = harness.logIn()
        harness.mail(MachineHarness.chatMessage(from: "bob", to: "alice", id: "d-1", deliveryID: 5))
        let first = Self.accepted(harness.send(.chat(ChatSend(to: "bob", messageID: "m-1", content: .text("1")))))
        harness.send(.chat(ChatSend(to: "bob", messageID: "m-2", content: .text("2"))))
        harness.send(.ack(Ack(sequence: 2)))
        #expect(first.count == 1)
        #expect(harness.machine.handle(.channelClosed).lines == [
            "uplink acks=[] receipts=[\"bob:d-1\"] probes=0", "accept [\"m-2\"]", "endSession connectionLost",
        ])
    }

    // MARK: Deliveries

    @Test("a delivery is written with the next sequence number; its ACK acknowledges it to the broker; its receipt waits for the window")
    func deliveryAndAck() {
        var harness = MachineHarness()
        _ = harness.logIn()
        #expect(harness.mail(MachineHarness.chatMessage(from: "bob", to: "alice", id: "d-1", deliveryID: 77)).lines == ["write DELIVERY d-1"])
        #expect(harness.send(.ack(Ack(sequence: 2))).lines == ["uplink acks=[77] receipts=[] probes=0"])
        #expect(harness.advance(by: .milliseconds(9)).lines == [])
        #expect(harness.advance(by: .milliseconds(1)).lines == ["uplink acks=[] receipts=[\"bob:d-1\"] probes=0"])
        // 64 receipts go at once, without the window.
        for index in 0..<Uplink<PendingChat>.receiptBatch {
            harness.mail(MachineHarness.chatMessage(from: "carol", to: "alice", id: "c-\(index)", deliveryID: UInt64(100 + index)))
        }
        var acks: [ConnectionAction] = []
        for sequence in UInt32(3)..<UInt32(3 + Uplink<PendingChat>.receiptBatch) {
            acks += harness.machine.handle(.frame(harness.frame(.ack(Ack(sequence: sequence)))))
        }
        acks += harness.machine.handle(.readComplete)
        #expect(acks.lines.count == 1 && acks.lines[0].contains("receipts=[\"carol:c-0,"))
    }

    @Test("a device that logged in without carbons gets none: the broker's copy is acknowledged and dropped")
    func noCarbons() {
        var harness = MachineHarness()
        _ = harness.logIn(carbons: false)
        var payload = ChatPayload(send: ChatSend(to: "bob", messageID: "m-9", content: .text("mine")), from: "alice", serverTime: 1, carbon: true)
        payload.to = "bob"
        let message = MosquittoMessage(topic: "im/u/alice/inbox", payload: PayloadCodec.encode(payload), qos: .atLeastOnce, deliveryID: 12)
        #expect(harness.mail(.message(message, .inbox(user: "alice"))).lines == ["uplink acks=[12] receipts=[] probes=0"])
    }

    @Test("mail before LOGIN_OK is kept, and delivered after it, in order")
    func earlyMail() {
        var harness = MachineHarness()
        harness.send(.login(LoginRequest(token: "t", deviceID: "phone")))
        #expect(harness.mail(MachineHarness.chatMessage(from: "bob", to: "alice", id: "d-1", deliveryID: 1)).lines == [])
        #expect(harness.mail(harness.opened()).lines == ["sessionOpened", "loggedIn alice/phone", "write LOGIN_OK", "write DELIVERY d-1"])
    }

    @Test("mail for a connection that is not logged in is dropped: deliveries stay with the broker")
    func mailWhenClosing() {
        var harness = MachineHarness()
        _ = harness.logIn()
        harness.send(.logout(Logout()))
        #expect(harness.mail(MachineHarness.chatMessage(from: "bob", to: "alice", id: "d-1", deliveryID: 1)).lines == [])
    }

    @Test("too many chats waiting hold reads back until they go")
    func waitingChatsHoldReads() {
        var limits = MachineHarness.limits
        limits.maxInFlight = 1
        var harness = MachineHarness(limits: limits)
        _ = harness.logIn()
        var first: [PendingChat] = []
        for index in 0...ReadGate.maxWaitingChats {
            first += Self.accepted(harness.machine.handle(.frame(harness.frame(.chat(ChatSend(to: "bob", messageID: "c\(index)", content: .text("x")))))))
        }
        first += Self.accepted(harness.machine.handle(.readComplete))
        #expect(harness.machine.handle(.readRequested).lines == [], "held: a device sending faster than the broker takes waits")
        var answered = first
        var reads = 0
        while let chat = answered.first {
            answered.removeFirst()
            let actions = harness.mail(Self.accepted(chat))
            reads += actions.lines.filter { $0 == "read" }.count
            answered += Self.accepted(actions)
        }
        #expect(reads == 1, "the held read happens once")
    }

    @Test("sequence numbers wrap past 2^32 - 1 to 1, never 0")
    func sequenceWraps() {
        var harness = MachineHarness()
        harness.machine.lastSequence = .max - 1
        #expect(harness.machine.nextSequence() == .max)
        #expect(harness.machine.nextSequence() == 1)
    }

    // MARK: Uplink

    @Test("at most maxInFlight chats are handed over; each settled one lets the next go, in order")
    func inFlightBound() {
        var uplink = Uplink<Int>(maxInFlight: 3)
        for chat in 1...5 { uplink.enqueue(chat) }
        #expect(uplink.take(now: Self.at(0))?.chats == [1, 2, 3])
        #expect(uplink.take(now: Self.at(0)) == nil, "no room: nothing goes")
        #expect(uplink.waitingChats == 2)
        uplink.settled()
        #expect(uplink.take(now: Self.at(0))?.chats == [4])
        uplink.settled()
        uplink.settled()
        #expect(uplink.take(now: Self.at(0))?.chats == [5])
        #expect(uplink.inFlight == 2)
    }

    @Test("a chat not ready holds those behind it; resolved, they go in order; dropped, the rest go")
    func readiness() {
        var uplink = Uplink<Int>(maxInFlight: 10)
        uplink.enqueue(1)
        uplink.enqueue(2, ready: false)
        uplink.enqueue(3)
        #expect(uplink.take(now: Self.at(0))?.chats == [1])
        #expect(uplink.take(now: Self.at(0)) == nil)
        #expect(uplink.resolve { $0 == 2 ? .some(20) : nil } == [])
        #expect(uplink.take(now: Self.at(0))?.chats == [20, 3])
        uplink.enqueue(4, ready: false)
        uplink.enqueue(5)
        #expect(uplink.resolve { _ in .some(nil) } == [4])
        #expect(uplink.take(now: Self.at(0))?.chats == [5])
    }

    @Test("receipts wait for their window, go at once when a batch fills or when flushed; acknowledgements never wait")
    func receiptWindow() {
        var uplink = Uplink<Int>(maxInFlight: 10)
        uplink.delivered(Self.origin("alice", "m1"), now: Self.ms(0))
        uplink.acknowledge(41)
        let first = uplink.take(now: Self.ms(1))
        #expect(first?.acknowledgements == [41])
        #expect(first?.receipts == [], "the window has not passed")
        #expect(uplink.receiptDeadline == Self.ms(0) + Uplink<Int>.receiptWindow)
        uplink.delivered(Self.origin("alice", "m2"), now: Self.ms(5))
        #expect(uplink.receiptDeadline == Self.ms(0) + Uplink<Int>.receiptWindow, "the first receipt's window counts")
        #expect(uplink.take(now: Self.ms(9)) == nil)
        #expect(uplink.take(now: Self.ms(10))?.receipts == [Self.origin("alice", "m1"), Self.origin("alice", "m2")])
        #expect(uplink.receiptDeadline == nil)

        for index in 0..<Uplink<Int>.receiptBatch { uplink.delivered(Self.origin("bob", "b\(index)"), now: Self.ms(20)) }
        #expect(uplink.take(now: Self.ms(20))?.receipts.count == Uplink<Int>.receiptBatch, "a full batch goes at once")

        uplink.delivered(Self.origin("carol", "c1"), now: Self.ms(30))
        #expect(uplink.take(now: Self.ms(30), flush: true)?.receipts == [Self.origin("carol", "c1")])
    }

    @Test("a probe is answered once per visit, and at most probeBatch per visit")
    func probes() {
        var uplink = Uplink<Int>(maxInFlight: 10)
        let probe = PresenceProbePayload(from: "bob", device: "phone")
        var taken = uplink.probe(probe)
        #expect(taken)
        taken = uplink.probe(probe)
        #expect(!taken, "the same device asking twice is answered once")
        #expect(uplink.take(now: Self.at(0))?.probes == [probe])
        taken = uplink.probe(probe)
        #expect(taken, "the next visit answers it again")
        var accepted = 1
        for index in 1..<Uplink<Int>.probeBatch where uplink.probe(PresenceProbePayload(from: "u\(index)", device: "d")) { accepted += 1 }
        #expect(accepted == Uplink<Int>.probeBatch)
        taken = uplink.probe(PresenceProbePayload(from: "late", device: "d"))
        #expect(!taken, "past the batch: dropped")
        #expect(uplink.take(now: Self.at(0))?.probes.count == Uplink<Int>.probeBatch)
    }

    // MARK: Rate limits

    @Test("a refused chat pauses reading until the retry time, longer each time the device ignores it (up to 16x)")
    func chatRefusalPauses() {
        var limits = DeviceRateLimits(chatRate: 10, chatBurst: 1, locationRate: 1)
        #expect(limits.admitChat(messageID: "a", now: Self.at(100)) == .allow)
        guard case .refuse(let retry, let pause) = limits.admitChat(messageID: "b", now: Self.at(100)) else {
            Issue.record("the second chat in the same instant is over a burst of 1")
            return
        }
        #expect(retry == 100)
        // Not before the bucket could refill: burst / rate = 0.1 s.
        #expect(pause == Self.at(100) + .milliseconds(100))
        // Ignoring it: something else after the retry time, refused again, with a longer pause.
        var last = pause
        var pauses: [TimeAmount] = []
        for index in 0..<6 {
            let now = last + .milliseconds(1)
            guard case .refuse(_, let until) = limits.admitChat(messageID: "other\(index)", now: now) else {
                Issue.record("a device that keeps ignoring refusals stays refused")
                return
            }
            pauses.append(until - now)
            last = until
        }
        #expect(pauses.first! > .milliseconds(100), "the pause grows once a refusal is ignored")
        #expect(pauses.last! <= .milliseconds(1600), "at most 16 times the base")
        #expect(zip(pauses, pauses.dropFirst()).allSatisfy { $0 <= $1 })
    }

    @Test("TYPING: 8 back to back, then the wait until the next is allowed; on the connection's clock")
    func typing() {
        var harness = MachineHarness()
        _ = harness.logIn()
        for _ in 0..<8 { #expect(harness.send(.typing(Typing(to: "bob", state: .typing))).lines.first?.hasPrefix("request typing") == true) }
        #expect(harness.send(.typing(Typing(to: "bob", state: .typing))).lines == ["write ACK #10 RATE_LIMITED"], "4 a second: the next in 250 ms")
        harness.clock.advance(by: .milliseconds(250))
        #expect(harness.send(.typing(Typing(to: "bob", state: .typing))).lines.first?.hasPrefix("request typing") == true)
    }

    @Test("positions: at most location.max_updates_per_second, on the connection's clock; the share is checked where the position is published")
    func locationRate() {
        var harness = MachineHarness()
        _ = harness.logIn()
        let update = LocationUpdate(location: IMLocation(lat: 1, lon: 2, tst: 1))
        #expect(harness.send(.locationUpdate(update)).lines.first?.hasPrefix("request locationUpdate") == true)
        #expect(harness.send(.locationUpdate(update)).lines == ["write ACK #3 RATE_LIMITED"])
        harness.clock.advance(by: .seconds(1))
        #expect(harness.send(.locationUpdate(update)).lines.first?.hasPrefix("request locationUpdate") == true)
    }
}
