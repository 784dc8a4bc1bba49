import Mosquitto
import Synchronization
import Testing

@testable import IMGateway

@Suite("ConnectionMailbox", .timeLimit(.minutes(1)))
struct ConnectionMailboxTests {
    /// Counts how often a mailbox woke its reader.
    final class WakeCounter: Sendable {
        private let count = Atomic<Int>(0)
        func wake() { count.wrappingAdd(1, ordering: .relaxed) }
        var value: Int { count.load(ordering: .relaxed) }
    }

    static func message(_ text: String) -> ConnectionMailbox.Mail {
        .message(MosquittoMessage(topic: "im/u/bob/inbox", payload: Array(text.utf8), qos: .atLeastOnce), .inbox(user: "bob"))
    }

    static func published(_ messageID: String, sequence: UInt32, session: UInt16 = 1) -> ConnectionMailbox.Mail {
        .chatAnswered(
            ConnectionMailbox.ChatTicket(messageID: messageID, sequence: sequence, sessionID: session, startedAt: .uptimeNanoseconds(0)),
            .accepted(.init(serverTime: 0, done: [], isRepeat: false, copies: 1)))
    }

    /// The session the losses come from.
    static let session = ObjectIdentifier(ConnectionMailbox.self)

    /// A comparable name for a piece of mail.
    static func label(_ mail: ConnectionMailbox.Mail) -> String {
        switch mail {
        case .message(let message, .inbox(let user)?): "message \(message.payloadString) for \(user)"
        case .message(let message, let kind): "message \(message.payloadString) (\(String(describing: kind)))"
        case .chatAnswered(let ticket, .accepted): "published \(ticket.messageID)#\(ticket.sequence)"
        case .chatAnswered(let ticket, let verdict): "refused \(ticket.messageID)#\(ticket.sequence): \(verdict)"
        case .lost(let reason, _): "lost: \(reason)"
        case .presenceWatchChanged(let users, let watching): "presence watch changed: \(users) \(watching)"
        case .ownStored(let offset): "own copy at \(offset)"
        case .groupResolved(let group, _): "members of \(group)"
        case .loginFinished: "login finished"
        case .leave(let reason, _): "leave: \(reason)"
        case .sessionEnded: "session ended"
        case .tokenVerified(_, let header): "token of #\(header.sequence) verified"
        case .page(_, let read): "page after \(read.after)"
        case .bounds(_, _, let header): "bounds for #\(header?.sequence ?? 0)"
        case .replied(let ack, let sessionID): "replied to #\(ack.sequence) in session \(sessionID)"
        case .answered(let message, let sessionID): "answered with \(message.body.map { type(of: $0).operation.description } ?? "?") in session \(sessionID)"
        case .sessionFailed(let why): "session failed: \(why)"
        }
    }

    @Test("the first post into an empty box wakes the reader once; further posts before a take do not")
    func firstPostWakes() {
        let wakes = WakeCounter()
        let mailbox = ConnectionMailbox { wakes.wake() }
        #expect(wakes.value == 0, "an empty box does not wake anyone")
        mailbox.post(Self.message("m1"))
        #expect(wakes.value == 1)
        mailbox.post(Self.message("m2"))
        mailbox.post(Self.published("c1", sequence: 7))
        mailbox.post(.lost(.aborted, session: Self.session))
        #expect(wakes.value == 1, "the reader was already told: one wake per batch")
    }

    @Test("take returns everything posted, in post order, and leaves the box empty")
    func takeReturnsAllInOrder() {
        let wakes = WakeCounter()
        let mailbox = ConnectionMailbox { wakes.wake() }
        #expect(mailbox.take().isEmpty, "taking from an empty box gives nothing")
        mailbox.post(Self.message("a"))
        mailbox.post(Self.published("c1", sequence: 1))
        mailbox.post(.chatAnswered(
            ConnectionMailbox.ChatTicket(messageID: "c2", sequence: 2, sessionID: 1, startedAt: .uptimeNanoseconds(0)), .notPublished("not authorised")))
        mailbox.post(Self.message("b"))
        mailbox.post(.lost(.broker(.sessionTakenOver), session: Self.session))
        let taken = mailbox.take().map(Self.label)
        #expect(taken == [
            "message a for bob",
            "published c1#1",
            "refused c2#2: \(ChatAcceptance.Verdict.notPublished("not authorised"))",
            "message b for bob",
            "lost: \(LossReason.broker(.sessionTakenOver))",
        ])
        #expect(mailbox.take().isEmpty, "the take emptied the box")
        #expect(wakes.value == 1)
    }

    @Test("after a take, the next post wakes the reader again")
    func wakesAgainAfterTake() {
        let wakes = WakeCounter()
        let mailbox = ConnectionMailbox { wakes.wake() }
        mailbox.post(Self.message("1"))
        #expect(mailbox.take().map(Self.label) == ["message 1 for bob"])
        mailbox.post(Self.message("2"))
        #expect(wakes.value == 2, "the box was empty again")
        mailbox.post(Self.message("3"))
        #expect(wakes.value == 2)
        #expect(mailbox.take().map(Self.label) == ["message 2 for bob", "message 3 for bob"])
        // An extra take of an empty box changes nothing: the next post still wakes once.
        #expect(mailbox.take().isEmpty)
        mailbox.post(.lost(.normal, session: Self.session))
        #expect(wakes.value == 3)
        #expect(mailbox.take().map(Self.label) == ["lost: \(LossReason.normal)"])
    }

    @Test("after close, what was left is dropped, posts are ignored and the reader is never woken again")
    func closeIgnoresPosts() {
        let wakes = WakeCounter()
        let mailbox = ConnectionMailbox { wakes.wake() }
        mailbox.post(Self.message("before"))
        #expect(wakes.value == 1)
        mailbox.close()
        #expect(mailbox.take().isEmpty, "close drops mail not taken yet")
        mailbox.post(Self.message("after"))
        mailbox.post(Self.published("c1", sequence: 1))
        mailbox.post(.lost(.aborted, session: Self.session))
        #expect(wakes.value == 1, "a closed box never wakes")
        #expect(mailbox.take().isEmpty, "a closed box keeps nothing")
        mailbox.close()  // closing twice is harmless
        mailbox.post(Self.message("later"))
        #expect(wakes.value == 1)
        #expect(mailbox.take().isEmpty)
    }

    @Test("close releases the reader the wake closure holds")
    func closeReleasesReader() {
        final class Reader: Sendable {}
        var reader: Reader? = Reader()
        weak let weakReader = reader
        let mailbox = ConnectionMailbox { [reader] in _ = reader }
        reader = nil
        #expect(weakReader != nil, "the open mailbox holds its reader")
        mailbox.close()
        #expect(weakReader == nil, "a closed mailbox must not keep the connection alive")
    }

    @Test("8 posters x 1000 posts at once: each arrives exactly once, each poster's order is kept, one wake per empty-to-non-empty")
    func concurrentPosts() async {
        let posters = 8
        let perPoster = 1000
        let wakes = WakeCounter()
        // The reader runs elsewhere (as the connection's event loop does) and takes once per wake.
        let (wakeEvents, wakeSink) = AsyncStream.makeStream(of: Void.self)
        let mailbox = ConnectionMailbox {
            wakes.wake()
            wakeSink.yield()
        }
        let reader = Task {
            var taken: [ConnectionMailbox.Mail] = []
            var takes = 0
            var emptyTakes = 0
            for await _ in wakeEvents {
                let batch = mailbox.take()
                takes += 1
                if batch.isEmpty { emptyTakes += 1 }
                taken += batch
            }
            return (taken: taken, takes: takes, emptyTakes: emptyTakes)
        }
        await withTaskGroup(of: Void.self) { group in
            for poster in 0..<posters {
                group.addTask {
                    for sequence in 0..<perPoster {
                        mailbox.post(Self.published("p\(poster)", sequence: UInt32(sequence), session: UInt16(poster)))
                    }
                }
            }
        }
        // Every wake was signalled inside a post, and every post has returned.
        wakeSink.finish()
        let result = await reader.value

        #expect(result.taken.count == posters * perPoster, "every post arrives exactly once")
        #expect(mailbox.take().isEmpty, "nothing was left in the box without a wake")
        var sequences = [[UInt32]](repeating: [], count: posters)
        for mail in result.taken {
            guard case .chatAnswered(let ticket, _) = mail else {
                Issue.record("unexpected mail \(Self.label(mail))")
                continue
            }
            sequences[Int(ticket.sessionID)].append(ticket.sequence)
        }
        for poster in 0..<posters {
            #expect(sequences[poster] == (0..<UInt32(perPoster)).map { $0 }, "poster \(poster)'s mail in its order, once each")
        }
        // The reader takes only when woken, so a take finds mail exactly when its wake
        // came from an empty-to-non-empty transition: no empty take means no spurious wake,
        // and nothing left over means no missed one.
        #expect(result.emptyTakes == 0, "a wake was not preceded by an empty-to-non-empty transition")
        #expect(result.takes == wakes.value)
        #expect(wakes.value >= 1 && wakes.value <= posters * perPoster)
    }
}
