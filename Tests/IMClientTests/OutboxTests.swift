import IMWire
import NIOCore
import Testing

@testable import IMClient

@Suite("Outbox: what must be ACKed, in which order, and what survives a lost connection")
struct OutboxTests {
    let t0 = ContinuousClock.now

    static func chat(_ id: String) -> IMMessage {
        .chat(ChatSend(to: "bob", messageID: id, content: .text("hi \(id)")))
    }

    static func receipt(_ id: String) -> IMMessage {
        .readReceipt(ReadReceipt(to: "bob", messageID: id))
    }

    static func presence(_ user: String) -> IMMessage {
        .presenceWatch(PresenceWatch(users: [user]))
    }

    static func location(_ tst: UInt64) -> IMMessage {
        .locationUpdate(LocationUpdate(location: IMLocation(lat: 1, lon: 2, tst: tst)))
    }

    static func publish(_ topic: String) -> IMMessage {
        .publish(Publish(topic: topic, payload: ByteBuffer(string: topic), qos: .atLeastOnce))
    }

    /// Sends everything `nextToSend` offers with consecutive sequences from `first`.
    @discardableResult
    func sendAll(_ outbox: inout Outbox, from first: UInt32, deadline: ContinuousClock.Instant) -> [OutboxEntry.ID] {
        let batch = outbox.nextToSend()
        for (offset, entry) in batch.enumerated() {
            outbox.markSent(entry.id, sequence: first + UInt32(offset), deadline: deadline)
        }
        return batch.map(\.id)
    }

    @Test("ids increase in enqueue order; a new outbox is empty")
    func idsIncrease() {
        var outbox = Outbox()
        #expect(outbox.isEmpty)
        #expect(outbox.count == 0)
        let ids = (0..<10).map { outbox.enqueue(Self.chat("m\($0)"), priority: .chat, durable: true).id }
        #expect(ids == ids.sorted())
        #expect(Set(ids).count == 10)
        #expect(outbox.count == 10)
        #expect(!outbox.isEmpty)
        #expect(outbox.maxInFlight == 64)
        #expect(outbox.maxRetransmits == 3)
    }

    @Test("the send order: chat, receipt, presence, location, pubsub; FIFO inside each")
    func priorityOrder() {
        var outbox = Outbox()
        let pubsub1 = outbox.enqueue(Self.publish("a"), priority: .pubsub, durable: true).id
        let location1 = outbox.enqueue(Self.location(1), priority: .location, durable: false).id
        let chat1 = outbox.enqueue(Self.chat("1"), priority: .chat, durable: true).id
        let receipt1 = outbox.enqueue(Self.receipt("1"), priority: .receipt, durable: true).id
        let presence1 = outbox.enqueue(Self.presence("carol"), priority: .presence, durable: false).id
        let pubsub2 = outbox.enqueue(Self.publish("b"), priority: .pubsub, durable: true).id
        let chat2 = outbox.enqueue(Self.chat("2"), priority: .chat, durable: true).id
        let receipt2 = outbox.enqueue(Self.receipt("2"), priority: .receipt, durable: true).id
        let location2 = outbox.enqueue(Self.location(2), priority: .location, durable: false).id
        let presence2 = outbox.enqueue(Self.presence("dave"), priority: .presence, durable: false).id
        let chat3 = outbox.enqueue(Self.chat("3"), priority: .chat, durable: true).id

        let expected = [chat1, chat2, chat3, receipt1, receipt2, presence1, presence2, location1, location2, pubsub1, pubsub2]
        #expect(outbox.nextToSend().map(\.id) == expected)
        #expect(outbox.entries.map(\.id) == expected)
        #expect(OutboxPriority.allCases.sorted() == [.chat, .receipt, .presence, .location, .pubsub])
        #expect(OutboxPriority.chat < .pubsub)
    }

    @Test("nextToSend offers without taking: nothing is in flight until markSent")
    func nextToSendIsAnOffer() {
        var outbox = Outbox()
        let a = outbox.enqueue(Self.chat("a"), priority: .chat, durable: true).id
        #expect(outbox.nextToSend().map(\.id) == [a])
        #expect(outbox.nextToSend().map(\.id) == [a])
        #expect(outbox.inFlightCount == 0)
        outbox.markSent(a, sequence: 1, deadline: t0 + .seconds(10))
        #expect(outbox.nextToSend().isEmpty)
        #expect(outbox.inFlightCount == 1)
        #expect(outbox.isInFlight(entry: a))
        #expect(outbox.entry(a)?.attempts == 1)
    }

    @Test("the window: at most maxInFlight written and unanswered")
    func window() {
        var outbox = Outbox(maxInFlight: 3)
        let ids = (0..<5).map { outbox.enqueue(Self.chat("m\($0)"), priority: .chat, durable: true).id }
        #expect(outbox.nextToSend().map(\.id) == Array(ids[0..<3]))
        outbox.markSent(ids[0], sequence: 1, deadline: t0 + .seconds(10))
        outbox.markSent(ids[1], sequence: 2, deadline: t0 + .seconds(10))
        #expect(outbox.nextToSend().map(\.id) == [ids[2]])
        outbox.markSent(ids[2], sequence: 3, deadline: t0 + .seconds(10))
        #expect(outbox.nextToSend().isEmpty)
        #expect(outbox.inFlightCount == 3)
        #expect(outbox.queuedCount == 2)
        #expect(outbox.acknowledge(sequence: 2)?.id == ids[1])
        #expect(outbox.nextToSend().map(\.id) == [ids[3]])
    }

    @Test("an ACK removes the entry in flight with its sequence; other sequences return nil")
    func acknowledge() throws {
        var outbox = Outbox()
        let a = outbox.enqueue(Self.chat("a"), priority: .chat, durable: true).id
        let b = outbox.enqueue(Self.chat("b"), priority: .chat, durable: true).id
        outbox.markSent(a, sequence: 10, deadline: t0 + .seconds(10))
        outbox.markSent(b, sequence: 11, deadline: t0 + .seconds(10))
        #expect(outbox.isInFlight(sequence: 10))
        #expect(outbox.isInFlight(sequence: 11))
        #expect(!outbox.isInFlight(sequence: 12))

        let ack11 = outbox.acknowledge(sequence: 11)
        let acked = try #require(ack11)
        #expect(acked.id == b)
        #expect(acked.message == Self.chat("b"))
        #expect(acked.attempts == 1)
        #expect(!acked.resend)
        #expect(!outbox.isInFlight(sequence: 11))
        #expect(outbox.acknowledge(sequence: 11) == nil)
        #expect(outbox.acknowledge(sequence: 99) == nil)  // a heartbeat's ACK
        #expect(outbox.count == 1)
        #expect(outbox.entries.map(\.id) == [a])
        #expect(outbox.nextDeadline == t0 + .seconds(10))
        #expect(outbox.acknowledge(sequence: 10)?.id == a)
        #expect(outbox.isEmpty)
        #expect(outbox.nextDeadline == nil)
    }

    @Test("overdue entries go back to the front of their queue, in order, marked resend")
    func expiry() throws {
        var outbox = Outbox()
        let a = outbox.enqueue(Self.chat("a"), priority: .chat, durable: true).id
        let b = outbox.enqueue(Self.chat("b"), priority: .chat, durable: true).id
        let c = outbox.enqueue(Self.chat("c"), priority: .chat, durable: true).id
        let r = outbox.enqueue(Self.receipt("r"), priority: .receipt, durable: true).id
        // b is written before a: the order put back is the enqueue order, not the write order.
        outbox.markSent(b, sequence: 1, deadline: t0 + .seconds(10))
        outbox.markSent(a, sequence: 2, deadline: t0 + .seconds(10))
        outbox.markSent(c, sequence: 3, deadline: t0 + .seconds(20))
        outbox.markSent(r, sequence: 4, deadline: t0 + .seconds(10))
        let d = outbox.enqueue(Self.chat("d"), priority: .chat, durable: true).id
        #expect(outbox.nextDeadline == t0 + .seconds(10))

        #expect(outbox.expire(now: t0 + .seconds(9)) == Outbox.ExpiryResult())
        let result = outbox.expire(now: t0 + .seconds(10))
        #expect(result.retransmit == [a, b, r])
        #expect(!result.connectionBroken)
        #expect(outbox.nextToSend().map(\.id) == [a, b, d, r])
        #expect(outbox.isInFlight(entry: c))
        #expect(!outbox.isInFlight(sequence: 1))
        #expect(outbox.nextDeadline == t0 + .seconds(20))

        let entryA = try #require(outbox.entry(a))
        #expect(entryA.resend)
        #expect(entryA.message == Self.chat("a"))  // kept as enqueued
        guard case .chat(let wire) = entryA.messageToWrite else {
            Issue.record("expected a chat")
            return
        }
        #expect(wire.resend)
        #expect(wire.messageID == "a")
        #expect(outbox.entry(d)?.resend == false)
        #expect(outbox.entry(r)?.resend == true)
        #expect(outbox.entry(c)?.resend == false)

        // The late ACK of a's first write finds nothing; the retransmission's ACK counts.
        #expect(outbox.acknowledge(sequence: 2) == nil)
        outbox.markSent(a, sequence: 5, deadline: t0 + .seconds(30))
        let ack5 = outbox.acknowledge(sequence: 5)
        let acked = try #require(ack5)
        #expect(acked.id == a)
        #expect(acked.attempts == 2)
    }

    @Test("connectionBroken once an entry was retransmitted maxRetransmits times without an ACK")
    func connectionBroken() {
        var outbox = Outbox(maxRetransmits: 2)
        let a = outbox.enqueue(Self.chat("a"), priority: .chat, durable: true).id
        var sequence: UInt32 = 1
        var now = t0
        var results: [Bool] = []
        for _ in 0..<3 {
            // Written (once, then retransmitted twice), never answered.
            outbox.markSent(a, sequence: sequence, deadline: now + .seconds(10))
            sequence += 1
            now = now + .seconds(10)
            results.append(outbox.expire(now: now).connectionBroken)
        }
        #expect(results == [false, false, true])
        #expect(outbox.entry(a)?.attempts == 3)
        #expect(outbox.entry(a)?.resend == true)
        #expect(outbox.nextToSend().map(\.id) == [a])  // still queued, for the next connection

        // A new connection starts the count over.
        #expect(outbox.connectionLost().isEmpty)
        outbox.markSent(a, sequence: sequence, deadline: now + .seconds(10))
        #expect(!outbox.expire(now: now + .seconds(10)).connectionBroken)
        #expect(outbox.entry(a)?.attempts == 4)
    }

    @Test("maxRetransmits 0: the first overdue ACK breaks the connection")
    func noRetransmits() {
        var outbox = Outbox(maxRetransmits: 0)
        let a = outbox.enqueue(Self.chat("a"), priority: .chat, durable: true).id
        outbox.markSent(a, sequence: 1, deadline: t0)
        let result = outbox.expire(now: t0)
        #expect(result.connectionBroken)
        #expect(result.retransmit == [a])
    }

    @Test("an ACK clears the entry's retransmit count: others do not inherit it")
    func ackedEntriesDoNotCount() {
        var outbox = Outbox(maxRetransmits: 1)
        let a = outbox.enqueue(Self.chat("a"), priority: .chat, durable: true).id
        let b = outbox.enqueue(Self.chat("b"), priority: .chat, durable: true).id
        outbox.markSent(a, sequence: 1, deadline: t0)
        outbox.markSent(b, sequence: 2, deadline: t0 + .seconds(100))
        #expect(!outbox.expire(now: t0).connectionBroken)  // a: once
        outbox.markSent(a, sequence: 3, deadline: t0 + .seconds(5))
        _ = outbox.acknowledge(sequence: 3)
        #expect(!outbox.expire(now: t0 + .seconds(100)).connectionBroken)  // b: once
    }

    @Test("a lost connection keeps durable entries (marked resend) and drops the others")
    func connectionLost() {
        var outbox = Outbox()
        let chatA = outbox.enqueue(Self.chat("a"), priority: .chat, durable: true).id
        let locationSent = outbox.enqueue(Self.location(1), priority: .location, durable: false).id
        let chatB = outbox.enqueue(Self.chat("b"), priority: .chat, durable: true).id
        let watch = outbox.enqueue(Self.presence("carol"), priority: .presence, durable: false).id
        outbox.markSent(chatA, sequence: 1, deadline: t0 + .seconds(10))
        outbox.markSent(locationSent, sequence: 2, deadline: t0 + .seconds(10))
        let chatC = outbox.enqueue(Self.chat("c"), priority: .chat, durable: true).id
        let publish = outbox.enqueue(Self.publish("t"), priority: .pubsub, durable: true).id
        outbox.markSent(publish, sequence: 3, deadline: t0 + .seconds(10))
        let locationQueued = outbox.enqueue(Self.location(2), priority: .location, durable: false).id

        let dropped = outbox.connectionLost()
        #expect(dropped.map(\.id) == [watch, locationSent, locationQueued])
        #expect(outbox.inFlightCount == 0)
        #expect(outbox.nextDeadline == nil)
        for sequence: UInt32 in 1...3 { #expect(!outbox.isInFlight(sequence: sequence)) }
        #expect(outbox.nextToSend().map(\.id) == [chatA, chatB, chatC, publish])
        #expect(outbox.entry(chatA)?.resend == true)
        #expect(outbox.entry(publish)?.resend == true)
        #expect(outbox.entry(chatB)?.resend == false)  // never written
        #expect(outbox.entry(chatC)?.resend == false)
        // A late ACK from the old connection finds nothing.
        #expect(outbox.acknowledge(sequence: 1) == nil)
        #expect(outbox.count == 4)
    }

    @Test("coalescing replaces a queued entry with the same key, not one in flight, not other keys")
    func coalescing() {
        var outbox = Outbox()
        let first = outbox.enqueue(Self.location(1), priority: .location, durable: false, coalescingKey: "loc")
        #expect(first.replaced.isEmpty)
        let other = outbox.enqueue(Self.location(1), priority: .location, durable: false, coalescingKey: "loc-2").id
        let plain = outbox.enqueue(Self.location(1), priority: .location, durable: false).id
        let second = outbox.enqueue(Self.location(2), priority: .location, durable: false, coalescingKey: "loc")
        #expect(second.replaced == [first.id])
        #expect(second.id > first.id)
        #expect(outbox.entry(first.id) == nil)
        #expect(outbox.count == 3)
        #expect(outbox.nextToSend().map(\.id) == [other, plain, second.id])

        outbox.markSent(second.id, sequence: 1, deadline: t0 + .seconds(10))
        let third = outbox.enqueue(Self.location(3), priority: .location, durable: false, coalescingKey: "loc")
        #expect(third.replaced.isEmpty)
        #expect(outbox.isInFlight(entry: second.id))
        #expect(outbox.count == 4)
        let fourth = outbox.enqueue(Self.location(4), priority: .location, durable: false, coalescingKey: "loc")
        #expect(fourth.replaced == [third.id])
        #expect(outbox.entry(fourth.id)?.message == Self.location(4))
        #expect(outbox.nextToSend().map(\.id) == [other, plain, fourth.id])
    }

    @Test("restore: queued in place, resend set, ids kept, later ids larger, duplicates ignored")
    func restore() {
        var outbox = Outbox()
        let existing = outbox.enqueue(Self.chat("new"), priority: .chat, durable: true).id  // id 1
        let saved = [
            OutboxEntry(id: 7, message: Self.chat("seven"), priority: .chat, durable: true, attempts: 2),
            OutboxEntry(id: 5, message: Self.receipt("five"), priority: .receipt, durable: true),
            OutboxEntry(id: 3, message: Self.chat("three"), priority: .chat, durable: true, attempts: 1),
        ]
        outbox.restore(saved)
        #expect(outbox.count == 4)
        #expect(outbox.nextToSend().map(\.id) == [existing, 3, 7, 5])
        #expect(outbox.entries.allSatisfy { $0.id == existing ? !$0.resend : $0.resend })
        #expect(outbox.entry(7)?.attempts == 2)
        #expect(outbox.entry(7)?.message == Self.chat("seven"))

        let next = outbox.enqueue(Self.chat("later"), priority: .chat, durable: true).id
        #expect(next == 8)

        outbox.restore([OutboxEntry(id: 3, message: Self.chat("other"), priority: .pubsub, durable: false)])
        #expect(outbox.count == 5)
        #expect(outbox.entry(3)?.message == Self.chat("three"))
    }

    @Test("cancel removes an entry wherever it is")
    func cancel() {
        var outbox = Outbox(maxInFlight: 2)
        let a = outbox.enqueue(Self.chat("a"), priority: .chat, durable: true).id
        let b = outbox.enqueue(Self.chat("b"), priority: .chat, durable: true).id
        let c = outbox.enqueue(Self.chat("c"), priority: .chat, durable: true).id
        outbox.markSent(a, sequence: 1, deadline: t0 + .seconds(10))
        outbox.markSent(b, sequence: 2, deadline: t0 + .seconds(10))

        #expect(outbox.cancel(a)?.id == a)
        #expect(!outbox.isInFlight(sequence: 1))
        #expect(outbox.acknowledge(sequence: 1) == nil)
        #expect(outbox.nextToSend().map(\.id) == [c])  // the window has room again
        #expect(outbox.cancel(c)?.id == c)
        #expect(outbox.nextToSend().isEmpty)
        #expect(outbox.cancel(c) == nil)
        #expect(outbox.cancel(999) == nil)
        #expect(outbox.entries.map(\.id) == [b])
        // markSent for a cancelled entry is ignored.
        outbox.markSent(c, sequence: 3, deadline: t0)
        #expect(!outbox.isInFlight(sequence: 3))
        #expect(outbox.count == 1)
    }

    @Test("markSent on an entry in flight moves it to the new sequence")
    func markSentAgain() {
        var outbox = Outbox()
        let a = outbox.enqueue(Self.chat("a"), priority: .chat, durable: true).id
        outbox.markSent(a, sequence: 1, deadline: t0 + .seconds(10))
        outbox.markSent(a, sequence: 2, deadline: t0 + .seconds(20))
        #expect(!outbox.isInFlight(sequence: 1))
        #expect(outbox.isInFlight(sequence: 2))
        #expect(outbox.inFlightCount == 1)
        #expect(outbox.entry(a)?.attempts == 2)
        #expect(outbox.nextDeadline == t0 + .seconds(20))
    }

    @Test("markedResend sets RESEND on chat and publish and leaves the rest alone")
    func markedResend() {
        guard case .chat(let chat) = Self.chat("a").markedResend() else {
            Issue.record("expected a chat")
            return
        }
        #expect(chat.resend)
        #expect(chat.messageID == "a")
        guard case .publish(let publish) = Self.publish("t").markedResend() else {
            Issue.record("expected a publish")
            return
        }
        #expect(publish.resend)
        #expect(publish.topic == "t")
        for message in [Self.receipt("r"), Self.location(1), Self.presence("x"), IMMessage.heartbeat] {
            #expect(message.markedResend() == message)
        }
        // On the wire: the RESEND flag is encoded.
        let frame = Self.chat("a").markedResend().frame(sequence: 1, timestamp: 0, sessionID: 1)
        guard case .chat(let decoded) = try? IMMessage(frame: frame) else {
            Issue.record("expected a chat frame")
            return
        }
        #expect(decoded.resend)
        // An entry writes its message plain until it may have been sent before.
        let entry = OutboxEntry(id: 1, message: Self.chat("a"), priority: .chat, durable: true)
        #expect(entry.messageToWrite == Self.chat("a"))
        var resent = entry
        resent.resend = true
        #expect(resent.messageToWrite == Self.chat("a").markedResend())
    }
}
