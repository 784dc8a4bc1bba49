import IMGateway
import IMWire
import NIOCore
import Testing

@Suite("DedupWindow")
struct DedupWindowTests {
    /// The fingerprint of the one message each id names in the tests that are not about reuse.
    static let same = ChatFingerprint(rawValue: 1)
    /// FNV-1a of TO `bob` and TEXT `hi`, each length-prefixed, computed independently.
    static let bobHi: UInt64 = 0xf624_1d34_224e_b89d

    @Test("an id is new until recorded, then a duplicate carrying its server time")
    func recordThenDuplicate() {
        var window = DedupWindow()
        #expect(window.check(sender: "alice", id: "m-1", fingerprint: Self.same, now: 0) == .new)
        #expect(window.check(sender: "alice", id: "m-1", fingerprint: Self.same, now: 1) == .new, "check alone must not record")
        window.record(sender: "alice", id: "m-1", fingerprint: Self.same, serverTime: 1_735_689_600_123, now: 1)
        #expect(window.check(sender: "alice", id: "m-1", fingerprint: Self.same, now: 2) == .duplicate(serverTime: 1_735_689_600_123))
        window.record(sender: "alice", id: "m-1", fingerprint: Self.same, serverTime: 99, now: 3)
        #expect(window.check(sender: "alice", id: "m-1", fingerprint: Self.same, now: 4) == .duplicate(serverTime: 1_735_689_600_123), "the first record stays")
        window.record(sender: "alice", id: "m-2", fingerprint: Self.same, now: 5)
        #expect(window.check(sender: "alice", id: "m-2", fingerprint: Self.same, now: 5) == .duplicate(serverTime: nil))
    }

    @Test("an id recorded for one message and checked with another is reused, not a duplicate")
    func reuse() {
        var window = DedupWindow(maxIDsPerSender: 10, maxAge: 60)
        let first = ChatFingerprint(ChatSend(to: "bob", messageID: "m-1", content: .text("hello")))
        window.record(sender: "alice", id: "m-1", fingerprint: first, serverTime: 7, now: 0)
        let resend = ChatFingerprint(ChatSend(to: "bob", messageID: "m-1", content: .text("hello"), qos: .exactlyOnce, resend: true))
        #expect(window.check(sender: "alice", id: "m-1", fingerprint: resend, now: 1) == .duplicate(serverTime: 7), "RESEND and QOS do not count")
        for other in [
            ChatSend(to: "bob", messageID: "m-1", content: .text("hello!")),
            ChatSend(to: "carol", messageID: "m-1", content: .text("hello")),
            ChatSend(to: "bob", messageID: "m-1", content: IMContent(tag: .custom, value: ByteBuffer(string: "hello"))),
            ChatSend(to: "bob", messageID: "m-1", content: .text("hello"), extensions: [TLVItem(tag: 0xF001, value: ByteBuffer(string: "x"))]),
        ] {
            #expect(window.check(sender: "alice", id: "m-1", fingerprint: ChatFingerprint(other), now: 1) == .reused, "\(other)")
        }
        // Reuse is refused, not recorded: the first message stays what the id names.
        #expect(window.check(sender: "alice", id: "m-1", fingerprint: first, now: 2) == .duplicate(serverTime: 7))
        // Another sender's id, and an id past the window, are new whatever they name.
        let other = ChatFingerprint(ChatSend(to: "bob", messageID: "m-1", content: .text("bye")))
        #expect(window.check(sender: "carol", id: "m-1", fingerprint: other, now: 2) == .new)
        #expect(window.check(sender: "alice", id: "m-1", fingerprint: other, now: 60) == .new)
    }

    @Test("a fingerprint covers recipient, content and application items, and nothing else")
    func fingerprint() {
        let app = [TLVItem(tag: 0xF001, value: ByteBuffer(string: "a")), TLVItem(tag: 0xF002, value: ByteBuffer(string: "b"))]
        let chat = ChatSend(to: "bob", messageID: "m-1", content: .text("hi"), extensions: app)
        #expect(ChatFingerprint(chat) == ChatFingerprint(ChatSend(to: "bob", messageID: "m-2", content: .text("hi"), qos: .exactlyOnce,
                                                                  resend: true, extensions: app.reversed())))
        // Length-prefixed fields: moving bytes from one field to the next is another message.
        #expect(ChatFingerprint(ChatSend(to: "bo", messageID: "m", content: .text("bhi")))
                != ChatFingerprint(ChatSend(to: "bob", messageID: "m", content: .text("hi"))))
        #expect(ChatFingerprint(chat) != ChatFingerprint(ChatSend(to: "bob", messageID: "m-1", content: .text("hi"))))
        // The same in every process: FNV-1a, a fixed value for a fixed message.
        #expect(ChatFingerprint(ChatSend(to: "bob", messageID: "m-1", content: .text("hi"))).description.count == 16)
        #expect(ChatFingerprint(ChatSend(to: "bob", messageID: "m-1", content: .text("hi"))).rawValue == Self.bobHi)
    }

    @Test("ids are per sender")
    func perSender() {
        var window = DedupWindow()
        window.record(sender: "alice", id: "m-1", fingerprint: Self.same, now: 0)
        #expect(window.check(sender: "bob", id: "m-1", fingerprint: Self.same, now: 0) == .new)
        #expect(window.senderCount == 1)
    }

    @Test("each sender keeps only its newest ids")
    func countEviction() {
        var window = DedupWindow(maxIDsPerSender: 3, maxAge: 600)
        for (index, id) in ["a", "b", "c", "d"].enumerated() { window.record(sender: "alice", id: id, fingerprint: Self.same, now: Double(index)) }
        window.record(sender: "bob", id: "a", fingerprint: Self.same, now: 4)
        #expect(window.check(sender: "alice", id: "a", fingerprint: Self.same, now: 5) == .new)
        for id in ["b", "c", "d"] { #expect(window.check(sender: "alice", id: id, fingerprint: Self.same, now: 5) == .duplicate(serverTime: nil)) }
        #expect(window.check(sender: "bob", id: "a", fingerprint: Self.same, now: 5) == .duplicate(serverTime: nil))
        #expect(window.idCount == 4)
    }

    @Test("ids are forgotten after maxAge")
    func ageEviction() {
        var window = DedupWindow(maxIDsPerSender: 100, maxAge: 10)
        window.record(sender: "alice", id: "old", fingerprint: Self.same, now: 0)
        window.record(sender: "alice", id: "new", fingerprint: Self.same, now: 5)
        #expect(window.check(sender: "alice", id: "old", fingerprint: Self.same, now: 9.9) == .duplicate(serverTime: nil))
        #expect(window.check(sender: "alice", id: "old", fingerprint: Self.same, now: 10) == .new)
        #expect(window.check(sender: "alice", id: "new", fingerprint: Self.same, now: 10) == .duplicate(serverTime: nil))
        #expect(window.idCount == 1)
    }

    @Test("senders that went quiet are swept, so memory stays bounded")
    func sweep() {
        var window = DedupWindow(maxIDsPerSender: 10, maxAge: 60)
        for sender in 0..<1000 {
            for id in 0..<20 { window.record(sender: "user-\(sender)", id: "m-\(id)", fingerprint: Self.same, now: Double(sender) * 0.01) }
        }
        #expect(window.senderCount == 1000)
        #expect(window.idCount == 10_000, "at most maxIDsPerSender each")
        // Another sender's traffic a while later triggers the sweep of everyone.
        _ = window.check(sender: "someone", id: "x", fingerprint: Self.same, now: 75)
        #expect(window.senderCount == 0 && window.idCount == 0)
        window.record(sender: "user-1", id: "m-1", fingerprint: Self.same, now: 80)
        window.purge(now: 200)
        #expect(window.senderCount == 0)
    }
}
