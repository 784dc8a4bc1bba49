import IMWire
import Testing

@testable import IMGateway

@Suite("GroupMemberships")
struct GroupMembershipsTests {
    @Test("the first lookup follows, others wait, then all know; changes of a followed group apply, of others not")
    func followThenKnow() {
        var groups = GroupMemberships(capacity: 10)
        #expect(groups.lookup("team") == .follow)
        #expect(groups.lookup("team") == .wait)
        groups.apply(group: "team", user: "alice", since: 1)
        groups.apply(group: "team", user: "bob", since: 2)
        groups.apply(group: "other", user: "eve", since: 3)
        #expect(groups.members(of: "team") == .some(nil), "not complete before the marker")
        let synced = groups.synced("team")
        #expect(synced?.members == ["alice": 1, "bob": 2] && synced?.release == [])
        #expect(groups.lookup("team") == .known(["alice": 1, "bob": 2]))
        groups.apply(group: "team", user: "bob", since: nil)
        groups.apply(group: "team", user: "carol", since: 4)
        #expect(groups.lookup("team") == .known(["alice": 1, "carol": 4]))
        #expect(groups.members(of: "other") == nil, "never followed")
    }

    @Test("past the capacity the least recently used complete group is let go, never the one just synced or one being looked up")
    func leastRecentlyUsed() {
        var groups = GroupMemberships(capacity: 2)
        for name in ["a", "b"] {
            _ = groups.lookup(name)
            _ = groups.synced(name)
        }
        _ = groups.lookup("a")  // a is now newer than b
        #expect(groups.lookup("c") == .follow)
        #expect(groups.lookup("d") == .follow, "two lookups under way")
        #expect(groups.synced("c")?.release == ["b", "a"], "b first, then a: c and d must fit; d is not complete")
        #expect(groups.count == 2 && groups.members(of: "d") == .some(nil))
    }

    @Test("with an archive: what it holds, with the changes published since the subscription on top; the broker's retained copies count only for a group the archive does not know")
    func archiveBacked() {
        var groups = GroupMemberships(capacity: 10, archiveBacked: true)
        _ = groups.lookup("team")
        // The broker restarted from an older save: it replays carol, removed since.
        groups.apply(group: "team", user: "carol", since: 1, retained: true)
        // Another gateway adds dave while this one reads the archive.
        groups.apply(group: "team", user: "dave", since: 9)
        #expect(groups.synced("team", archived: ["alice": 2, "bob": 3])?.members == ["alice": 2, "bob": 3, "dave": 9])
        // Followed: a change applies, a retained replay does not.
        groups.apply(group: "team", user: "alice", since: nil)
        groups.apply(group: "team", user: "carol", since: 1, retained: true)
        #expect(groups.lookup("team") == .known(["bob": 3, "dave": 9]))
        // A group the archive does not know (made before archives kept groups): the broker's.
        _ = groups.lookup("old")
        groups.apply(group: "old", user: "erin", since: 5, retained: true)
        groups.apply(group: "old", user: "erin", since: nil)
        groups.apply(group: "old", user: "fay", since: 6, retained: true)
        #expect(groups.synced("old", archived: nil)?.members == ["fay": 6], "erin's removal came after her replay")
        // Without an archive, the broker's retained copies are the group.
        var plain = GroupMemberships(capacity: 10)
        _ = plain.lookup("team")
        plain.apply(group: "team", user: "carol", since: 1, retained: true)
        #expect(plain.synced("team")?.members == ["carol": 1])
        plain.apply(group: "team", user: "gus", since: 7, retained: true)
        #expect(plain.lookup("team") == .known(["carol": 1, "gus": 7]))
    }

    @Test("a failed lookup leaves the group unknown; a reset forgets the groups followed, not a lookup under way")
    func failures() {
        var groups = GroupMemberships(capacity: 10)
        _ = groups.lookup("team")
        groups.failed("team")
        #expect(groups.members(of: "team") == nil && groups.lookup("team") == .follow)
        _ = groups.lookup("done")
        _ = groups.synced("done")
        groups.reset()
        #expect(groups.members(of: "done") == nil, "followed on the old connection: forgotten")
        #expect(groups.synced("team")?.members == [:], "under way: it completes on the new connection")
        #expect(groups.lookup("done") == .follow)
    }
}

@Suite("TypingPayload")
struct TypingPayloadTests {
    @Test("every state round-trips through its name; an unknown name or a bad id is refused")
    func names() throws {
        for state in TypingState.allCases {
            let payload = TypingPayload(from: "alice", group: "team", state: state, ts: 1)
            let decoded = try PayloadCodec.decode(TypingPayload.self, from: PayloadCodec.encode(payload))
            #expect(try decoded.notice() == Typing(group: "team", from: "alice", state: state))
        }
        #expect(String(decoding: PayloadCodec.encode(TypingPayload(from: "alice", state: .typing, ts: 7)), as: UTF8.self)
            == #"{"from":"alice","state":"typing","ts":7}"#)
        var unknown = TypingPayload(from: "alice", state: .typing, ts: 1)
        unknown.state = "dancing"
        #expect(throws: PayloadError.self) { try unknown.notice() }
        #expect(throws: PayloadError.self) { try TypingPayload(from: "a/b", state: .typing, ts: 1).notice() }
    }
}
