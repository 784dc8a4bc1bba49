@testable import IMGateway
import IMWire
import Mosquitto
import NIOCore
import Testing

/// The data path of ``ConnectionStateMachine`` (``Uplink``, ``Downlink``, ``DeviceRateLimits``,
/// mail, sequence numbers), without sockets.
@Suite("ConnectionStateMachine's data path")
struct ConnectionStateMachineDataPathTests {
    typealias Machine = ConnectionStateMachine
    typealias States = ConnectionStateMachineTests
    static func at(_ seconds: Int64) -> NIODeadline { States.at(seconds) }
    static func ms(_ milliseconds: Int64) -> NIODeadline { States.start + .milliseconds(milliseconds) }

    static func machine(_ start: States.Start, limits: Machine.Limits = States.limits) -> Machine {
        var machine = Machine(limits: limits, now: States.start)
        for event in start.setup { _ = machine.handle(event) }
        return machine
    }

    static func chat(_ id: String) -> PendingChat {
        PendingChat(
            chat: ChatAcceptance.Chat(
                send: ChatSend(to: "bob", messageID: id, content: .text(id)), from: "alice", device: "phone", recipients: ["bob"],
                ownCopy: false, carbon: false, serverTime: 0, window: 8),
            ticket: .init(messageID: id, sequence: 1, sessionID: 1))
    }

    static func origin(_ from: String, _ id: String) -> PendingDeliveries.Origin { .init(from: from, messageID: id) }

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

    @Test("TYPING: 8 back to back, then the wait until the next is allowed")
    func typing() {
        var limits = DeviceRateLimits(chatRate: 0, chatBurst: 1, locationRate: 1)
        for _ in 0..<8 { #expect(limits.admitTyping(now: Self.at(5)) == nil) }
        #expect(limits.admitTyping(now: Self.at(5)) == 250, "4 a second: a token every 250 ms")
        #expect(limits.admitTyping(now: Self.at(5) + .milliseconds(250)) == nil)
    }

    @Test("a machine's refused chat pauses its reads; a paused read resumes at the pause's end")
    func machinePausesReading() {
        var limits = States.limits
        limits.chatRate = 10
        limits.chatBurst = 1
        var machine = Self.machine(.loggedIn, limits: limits)
        #expect(machine.admitChat(messageID: "a", now: Self.at(2)) == .allow)
        guard case .refuse(_, let until) = machine.admitChat(messageID: "b", now: Self.at(2)) else {
            Issue.record("over the burst")
            return
        }
        #expect(machine.nextDeadline == until)
        let reading = machine.readRequested()
        #expect(!reading, "nothing is read during the pause")
        #expect(machine.handle(.timerFired(now: until)) == .resumeReading)
    }

    // MARK: Mail, frames, deadlines

    @Test("mail is held before LOGIN_OK, handled once logged in, only settled in every other state", arguments: States.Start.allCases)
    func mailRoutes(_ start: States.Start) {
        var machine = Self.machine(start)
        let mail: [ConnectionMailbox.Mail] = [.ownStored(7)]
        switch (start, machine.mailArrived(mail)) {
        case (.authenticating, .held):
            #expect(machine.takeEarlyMail().count == 1)
            #expect(machine.takeEarlyMail().isEmpty, "taken once")
        case (.loggedIn, .handle(let handled)):
            #expect(handled.count == 1)
        case (.awaitingLogin, .settleOnly), (.closingLoginPending, .settleOnly), (.closingSessionOpen, .settleOnly),
             (.closingNothingOpen, .settleOnly), (.closingSessionEnding, .settleOnly), (.closedLoginPending, .settleOnly),
             (.closedSessionEnding, .settleOnly), (.finished, .settleOnly):
            #expect(machine.takeEarlyMail().isEmpty)
        case (let start, let route):
            Issue.record("\(start): routed \(route)")
        }
    }

    @Test("LOGIN_OK carries what the login found; the device's CARBONS choice is kept")
    func completeLoginCarriesTheGrant() {
        var machine = Self.machine(.authenticating)
        let grant = LoginGrant(resumed: true, tokenExpiry: 42, carbons: false, sync: LoginSync(position: 3, status: .continued, last: 9, saved: 3))
        #expect(machine.handle(.loginSucceeded(tokenDeadline: Self.at(3600), grant: grant)) == .completeLogin(grant))
        #expect(!machine.downlink.wantsCarbons)
    }

    @Test("frames are numbered from 1; one the device must ACK is pending from the moment it is written, and its ACK feeds the uplink")
    func framesAndAcks() {
        var machine = Self.machine(.loggedIn)
        machine.downlink.queue.enqueue(Downlink.Entry(message: .heartbeat, deliveryID: nil, origin: nil), class: .presence)
        machine.downlink.queue.enqueue(
            Downlink.Entry(message: .heartbeat, deliveryID: 77, origin: Self.origin("alice", "m1"), offset: 12), class: .chat)
        let first = machine.nextFrame(now: Self.at(3))
        let second = machine.nextFrame(now: Self.at(3))
        #expect(first?.sequence == 1 && first?.0.deliveryID == 77, "chat first")
        #expect(second?.sequence == 2 && second?.0.isAwaited == false)
        #expect(machine.nextFrame(now: Self.at(3)) == nil)
        #expect(machine.deliveries.count == 1)
        #expect(machine.nextDeadline == Self.at(3) + States.limits.deliveryAckTimeout)
        #expect(machine.acknowledged(2, now: Self.at(4)) == nil, "not awaited: nothing settles")
        #expect(machine.acknowledged(1, now: Self.at(4)) == 12)
        #expect(machine.deliveries.count == 0)
        #expect(machine.nextDeadline == Self.at(4) + Uplink<PendingChat>.receiptWindow, "the receipt's window is a deadline of the machine")
        let work = machine.takeUplink(now: Self.at(4))
        #expect(work?.acknowledgements == [77])
        #expect(work?.receipts == [])
        #expect(machine.takeUplink(now: Self.at(4) + Uplink<PendingChat>.receiptWindow)?.receipts == [Self.origin("alice", "m1")])
    }

    @Test("no frame is taken for the device and nothing goes to the broker once the connection is closing, but the last uplink flushes")
    func closingStopsTheDataPath() {
        var machine = Self.machine(.loggedIn)
        machine.downlink.queue.enqueue(Downlink.Entry(message: .heartbeat, deliveryID: 5, origin: nil), class: .chat)
        machine.uplink.enqueue(Self.chat("c1"))
        machine.uplink.delivered(Self.origin("alice", "m1"), now: Self.at(2))
        _ = machine.handle(.channelClosed)
        #expect(machine.nextFrame(now: Self.at(3)) == nil)
        #expect(machine.takeUplink(now: Self.at(3)) == nil)
        let last = machine.takeUplink(now: Self.at(3), ending: true)
        #expect(last?.chats.map(\.ticket.messageID) == ["c1"])
        #expect(last?.receipts == [Self.origin("alice", "m1")], "ending flushes the receipts")
    }

    @Test("sequence numbers wrap past 2^32 - 1 to 1, never 0")
    func sequenceWraps() {
        var machine = Self.machine(.loggedIn)
        machine.lastSequence = .max - 1
        #expect(machine.nextSequence() == .max)
        #expect(machine.nextSequence() == 1)
    }

    @Test("the archive's timer is a deadline of the machine, fired once")
    func archiveTimer() {
        var machine = Self.machine(.loggedIn)
        machine.armArchiveTimer(now: Self.at(2), after: .seconds(2))
        #expect(machine.archive == nil, "no archive: nothing to arm")
        machine.archive = ArchiveLink()
        machine.armArchiveTimer(now: Self.at(2), after: .seconds(2))
        machine.armArchiveTimer(now: Self.at(3), after: .seconds(2))
        #expect(machine.nextDeadline == Self.at(4), "armed once, at the first time asked")
        let early = machine.archiveTimerDue(now: Self.at(3))
        let due = machine.archiveTimerDue(now: Self.at(4))
        let again = machine.archiveTimerDue(now: Self.at(5))
        #expect(!early)
        #expect(due)
        #expect(!again, "fired once")
    }

    @Test("chats waiting hold reads back until the broker takes them")
    func waitingChatsHoldReads() {
        var machine = Self.machine(.loggedIn, limits: {
            var limits = States.limits
            limits.maxInFlight = 1
            return limits
        }())
        for index in 0...ReadGate.maxWaitingChats { machine.uplink.enqueue(Self.chat("c\(index)")) }
        _ = machine.chatsChanged()
        let reading = machine.readRequested()
        #expect(!reading, "a device sending faster than the broker takes waits")
        while machine.takeUplink(now: Self.at(2)) != nil { machine.uplink.settled() }
        let reads = machine.chatsChanged()
        #expect(reads, "the held read happens once they are gone")
    }
}
