import IMArchive
import Testing

/// The same history, conversation-list and read-marker checks for every store (SQLite in
/// IMArchiveTests, PostgreSQL in the integration tests): what a store answers must not depend
/// on which it is.
package enum ArchiveHistoryScenario {
    /// A one-to-one chat from `sender` to `to`, with the sender's own copy from `device`; its
    /// body is JSON as imgw writes it.
    package static func direct(_ sender: String, _ id: String, to: String, device: String? = "phone", at time: UInt64) -> ArchiveMessage {
        var copies = [ArchiveMessage.Copy(stream: to, conversation: .user(sender))]
        if let device { copies.append(.init(stream: sender, origin: device, conversation: .user(to))) }
        return ArchiveMessage(
            sender: sender, messageID: id, fingerprint: fingerprint(id + to), serverTime: time,
            body: Array(#"{"from":"\#(sender)","id":"\#(id)","text":"\#(id)","to":"\#(to)","ts":\#(time),"type":"text"}"#.utf8), copies: copies)
    }

    /// A chat in `group` from `sender` to `members` (the sender's own copy from its phone).
    package static func inGroup(_ group: String, _ sender: String, _ id: String, members: [String], at time: UInt64) -> ArchiveMessage {
        let copies = members.filter { $0 != sender }.map { ArchiveMessage.Copy(stream: $0, conversation: .group(group)) }
            + [ArchiveMessage.Copy(stream: sender, origin: "phone", conversation: .group(group))]
        return ArchiveMessage(
            sender: sender, messageID: id, fingerprint: fingerprint(id + group), serverTime: time,
            body: Array(#"{"from":"\#(sender)","group":"\#(group)","id":"\#(id)","text":"\#(id)","to":"\#(group)","ts":\#(time),"type":"text"}"#.utf8),
            copies: copies)
    }

    /// FNV-1a: the same in every process.
    static func fingerprint(_ text: String) -> UInt64 {
        var value: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 { value = (value ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return value
    }

    /// Runs every check against `store` (empty when called).
    package static func run(_ store: any ArchiveStore) async throws {
        // bob's stream: 30 from alice with 3 of his own replies among them, 2 from carol, then
        // the group: 2 before dave joins, 2 after.
        var time: UInt64 = 1_000
        func tick() -> UInt64 { time += 1; return time }
        var batch: [ArchiveMessage] = []
        for index in 1...30 {
            batch.append(direct("alice", "a-\(index)", to: "bob", at: tick()))
            if index % 10 == 0 { batch.append(direct("bob", "b-\(index)", to: "alice", at: tick())) }
        }
        _ = try await store.commit(Array(batch.prefix(17)), positions: [])
        _ = try await store.commit(Array(batch.dropFirst(17)), positions: [])
        _ = try await store.commit([direct("carol", "c-1", to: "bob", device: nil, at: tick()), direct("carol", "c-2", to: "bob", at: tick())], positions: [])
        _ = try await store.commit([
            inGroup("team", "alice", "g-1", members: ["alice", "bob", "carol"], at: tick()),
            inGroup("team", "carol", "g-2", members: ["alice", "bob", "carol"], at: tick()),
        ], positions: [])
        _ = try await store.commit([
            inGroup("team", "dave", "g-3", members: ["alice", "bob", "carol", "dave"], at: tick()),
            inGroup("team", "alice", "g-4", members: ["alice", "bob", "carol", "dave"], at: tick()),
        ], positions: [])

        // History, newest page first, then back to the start: every message once, in order.
        var pages: [[String]] = []
        var position = HistoryPosition.latest
        while true {
            let page = try await store.history(stream: "bob", conversation: .user("alice"), position: position, limit: 10)
            #expect(page.entries.map(\.offset) == page.entries.map(\.offset).sorted(), "a page is oldest first")
            #expect(page.entries.allSatisfy { $0.conversation == .user("alice") })
            pages.append(page.entries.map(\.messageID))
            guard !page.complete, let oldest = page.entries.first else { break }
            position = .before(oldest.offset)
        }
        let expected = batch.map(\.messageID)
        #expect(pages.count == 4, "33 messages in pages of 10: \(pages.map(\.count))")
        #expect(Array(pages.reversed().joined()) == expected, "paged back: \(pages)")
        let own = try await store.history(stream: "bob", conversation: .user("alice"), position: .latest, limit: 1)
        #expect(own.entries.map(\.messageID) == ["b-30"] && own.entries.first?.origin == "phone" && !own.complete)
        // Forward from the start, and from the end.
        let first = try await store.history(stream: "bob", conversation: .user("alice"), position: .after(0), limit: 5)
        #expect(first.entries.map(\.messageID) == Array(expected.prefix(5)) && !first.complete)
        let end = try await store.history(stream: "bob", conversation: .user("alice"), position: .after(first.entries[4].offset), limit: 200)
        #expect(end.entries.map(\.messageID) == Array(expected.dropFirst(5)) && end.complete)
        // The same conversation from alice's side: her copies of what she sent, bob's replies.
        let alice = try await store.history(stream: "alice", conversation: .user("bob"), position: .latest, limit: 200)
        #expect(alice.entries.map(\.messageID) == expected && alice.complete)
        #expect(alice.entries.filter { $0.origin != nil }.count == 30)
        // A group: each member's history holds what was sent while it was a member.
        let dave = try await store.history(stream: "dave", conversation: .group("team"), position: .latest, limit: 50)
        #expect(dave.entries.map(\.messageID) == ["g-3", "g-4"] && dave.complete)
        let carol = try await store.history(stream: "carol", conversation: .group("team"), position: .latest, limit: 50)
        #expect(carol.entries.map(\.messageID) == ["g-1", "g-2", "g-3", "g-4"])
        // Nothing: a conversation never had, a zero limit.
        #expect(try await store.history(stream: "bob", conversation: .user("zed"), position: .latest, limit: 10) == HistoryPage(entries: [], complete: true))
        #expect(try await store.history(stream: "bob", conversation: .group("alice"), position: .latest, limit: 10).entries.isEmpty,
                "a group named like a user is another conversation")

        // The conversation list, the most recent first, with its newest message and unread count.
        let list = try await store.conversations(user: "bob", before: nil, limit: 50)
        #expect(list.complete)
        #expect(list.conversations.map(\.conversation) == [.group("team"), .user("carol"), .user("alice")])
        let team = try #require(list.conversations.first)
        #expect(team.last?.messageID == "g-4" && team.last?.sender == "alice" && team.lastTime == time)
        #expect(team.unread == 4 && team.readThrough == 0)
        let withAlice = try #require(list.conversations.last)
        // bob's reply after a-30 read the conversation: nothing unread.
        #expect(withAlice.last?.messageID == "b-30" && withAlice.unread == 0 && withAlice.readThrough == withAlice.lastOffset)
        #expect(list.conversations[1].unread == 2)
        #expect(try await store.conversations(user: "dave", before: nil, limit: 50).conversations.map { $0.unread } == [1],
                "dave's own message is not unread; alice's after it is")
        // Paging the list.
        let top = try await store.conversations(user: "bob", before: nil, limit: 2)
        #expect(top.conversations.map(\.conversation) == [.group("team"), .user("carol")] && !top.complete)
        let rest = try await store.conversations(user: "bob", before: top.conversations.last?.lastOffset, limit: 2)
        #expect(rest.conversations.map(\.conversation) == [.user("alice")] && rest.complete)

        // Read markers.
        let g1 = try #require(carol.entries.first)
        let bobTeam = try await store.history(stream: "bob", conversation: .group("team"), position: .latest, limit: 50).entries
        #expect(bobTeam.count == 4)
        #expect(try await store.markRead(user: "bob", conversation: .group("team"), through: bobTeam[1].offset)
                == .marked(ReadMarker(conversation: .group("team"), readThrough: bobTeam[1].offset, unread: 2)))
        // A marker never moves back.
        #expect(try await store.markRead(user: "bob", conversation: .group("team"), through: bobTeam[0].offset)
                == .marked(ReadMarker(conversation: .group("team"), readThrough: bobTeam[1].offset, unread: 2)))
        #expect(try await store.markRead(user: "bob", conversation: .group("team"), through: bobTeam[3].offset + 1)
                == .pastEnd(last: bobTeam[3].offset))
        #expect(try await store.markRead(user: "bob", conversation: .user("zed"), through: 1) == .unknownConversation)
        #expect(try await store.markRead(user: "bob", conversation: .group("team"), through: bobTeam[3].offset)
                == .marked(ReadMarker(conversation: .group("team"), readThrough: bobTeam[3].offset, unread: 0)))
        #expect(try await store.conversations(user: "bob", before: nil, limit: 1).conversations.first?.unread == 0)
        // A new message after the marker is unread again; the marker stays.
        _ = try await store.commit([inGroup("team", "carol", "g-5", members: ["alice", "bob", "carol", "dave"], at: tick())], positions: [])
        let after = try #require(try await store.conversations(user: "bob", before: nil, limit: 1).conversations.first)
        #expect(after.unread == 1 && after.readThrough == bobTeam[3].offset && after.last?.messageID == "g-5")
        // Deleting for everyone: the body becomes the tombstone, each stream with a copy gets
        // a tombstone entry at its end (the sender's own from the deleting device).
        let bobLast = try await store.bounds(of: "bob").last
        let aliceLast = try await store.bounds(of: "alice").last
        let tombstone = Array(#"{"deleted":1}"#.utf8)
        let deleted = try #require(try await store.deleteMessage(sender: "alice", messageID: "a-5", at: 9_000, origin: "laptop") { body in
            // Made from the stored body.
            String(decoding: body, as: UTF8.self).contains(#""id":"a-5""#) ? tombstone : []
        })
        #expect(deleted.first && deleted.deletedAt == 9_000)
        #expect(Set(deleted.tombstones) == [StoredCopy(stream: "bob", offset: bobLast + 1), StoredCopy(stream: "alice", offset: aliceLast + 1, origin: "laptop")])
        let again = try #require(try await store.deleteMessage(sender: "alice", messageID: "a-5", at: 9_500, origin: "phone") { _ in [1] })
        #expect(!again.first && again.deletedAt == 9_000 && Set(again.tombstones) == Set(deleted.tombstones), "deleting again changes nothing")
        #expect(try await store.deleteMessage(sender: "alice", messageID: "nope", at: 9_000, origin: nil) { _ in tombstone } == nil)
        #expect(try await store.deleteMessage(sender: "bob", messageID: "a-6", at: 9_000, origin: nil) { _ in tombstone } == nil,
                "another sender's message is not found under this sender")
        // Catching up reads the tombstone; history shows the message in its place, deleted.
        let caught = try await store.read(stream: "bob", after: bobLast, through: .max, limit: 10)
        #expect(caught.map(\.offset) == [bobLast + 1] && caught.first?.messageID == "a-5" && caught.first?.body == tombstone)
        let aliceHistory = try await store.history(stream: "bob", conversation: .user("alice"), position: .latest, limit: 200)
        #expect(aliceHistory.entries.count == 33, "the tombstone is not a message of its own")
        #expect(aliceHistory.entries.first { $0.messageID == "a-5" }?.body == tombstone)
        #expect(aliceHistory.entries.first { $0.messageID == "a-6" }?.body != tombstone)
        let lines = try await store.conversations(user: "bob", before: nil, limit: 50).conversations
        #expect(lines.first { $0.conversation == .user("alice") }?.unread == 0, "a tombstone is not unread")
        #expect(lines.first { $0.conversation == .user("alice") }?.last?.messageID == "b-30")

        // carol's list is untouched by bob's markers.
        #expect(try await store.conversations(user: "carol", before: nil, limit: 50).conversations.first { $0.conversation == .group("team") }?
            .readThrough ?? 0 > g1.offset)

        // Erasing carol: what she sent reads as deleted in bob's history, her own stream,
        // list and positions are gone, her stream's offsets are not given out again.
        let carolLast = try await store.bounds(of: "carol").last
        let erased = try await store.eraseUser("carol", at: 9_900) { _ in tombstone }
        #expect(erased.messages == 4, "c-1, c-2, g-2, g-5") // carol sent 4
        #expect(erased.entries > 0)
        #expect(try await store.read(stream: "carol", after: 0, through: .max, limit: 100).isEmpty)
        #expect(try await store.conversations(user: "carol", before: nil, limit: 50).conversations.isEmpty)
        let fromCarol = try await store.history(stream: "bob", conversation: .user("carol"), position: .latest, limit: 10).entries
        #expect(fromCarol.count == 2 && fromCarol.allSatisfy { $0.body == tombstone })
        #expect(try await store.eraseUser("carol", at: 9_950) { _ in tombstone } == UserErasure(messages: 0, entries: 0))
        _ = try await store.commit([direct("alice", "to-carol", to: "carol", at: tick())], positions: [])
        #expect(try await store.read(stream: "carol", after: 0, through: .max, limit: 10).map(\.offset) == [carolLast + 1])
    }

    /// The cap per conversation (``ArchiveStore/trimConversation(stream:conversation:keep:limit:)``)
    /// against `store` (empty when called): the oldest entries beyond the cap go from one
    /// stream, the others keep theirs, a message goes once no stream holds it, the unread
    /// count and the stream's trimmed mark follow.
    package static func trim(_ store: any ArchiveStore) async throws {
        var time: UInt64 = 5_000
        func tick() -> UInt64 { time += 1; return time }
        // bob: 10 from alice, with 2 from carol among them.
        var batch: [ArchiveMessage] = []
        for index in 1...10 {
            batch.append(direct("alice", "t-\(index)", to: "bob", at: tick()))
            if index == 3 || index == 8 { batch.append(direct("carol", "tc-\(index)", to: "bob", at: tick())) }
        }
        _ = try await store.commit(batch, positions: [])
        let bobBefore = try await store.read(stream: "bob", after: 0, through: .max, limit: 100)
        #expect(bobBefore.count == 12)
        let fromAlice = bobBefore.filter { $0.sender == "alice" }
        #expect(try await store.bounds(of: "bob").trimmedThrough == 0)

        // At most 2 a transaction: the oldest two go first.
        #expect(try await store.trimConversation(stream: "bob", conversation: .user("alice"), keep: 4, limit: 2) == 2)
        #expect(try await store.bounds(of: "bob").trimmedThrough == fromAlice[1].offset)
        #expect(try await store.trimConversation(stream: "bob", conversation: .user("alice"), keep: 4, limit: 100) == 4)
        #expect(try await store.trimConversation(stream: "bob", conversation: .user("alice"), keep: 4, limit: 100) == 0, "nothing beyond the cap is left")
        let kept = try await store.history(stream: "bob", conversation: .user("alice"), position: .latest, limit: 50)
        #expect(kept.entries.map(\.messageID) == ["t-7", "t-8", "t-9", "t-10"])
        #expect(kept.complete)
        let bounds = try await store.bounds(of: "bob")
        #expect(bounds.trimmedThrough == fromAlice[5].offset)
        #expect(bounds.hasLost(after: 0) && bounds.hasLost(after: fromAlice[5].offset - 1))
        #expect(!bounds.hasLost(after: fromAlice[5].offset), "a device that had everything up to the last deleted lost nothing")
        // carol's conversation and the rest of the stream are untouched; catching up skips the holes.
        #expect(try await store.history(stream: "bob", conversation: .user("carol"), position: .latest, limit: 50).entries.map(\.messageID) == ["tc-3", "tc-8"])
        #expect(try await store.read(stream: "bob", after: 0, through: .max, limit: 100).map(\.messageID) == ["tc-3", "t-7", "t-8", "tc-8", "t-9", "t-10"])
        let bobList = try await store.conversations(user: "bob", before: nil, limit: 10).conversations
        #expect(bobList.first { $0.conversation == .user("alice") }?.unread == 4, "the unread count follows")
        // alice's own copies keep the messages.
        #expect(try await store.history(stream: "alice", conversation: .user("bob"), position: .latest, limit: 50).entries.count == 10)
        #expect(try await store.size().messages == 12)
        // Once alice's copies go too, the messages no stream holds are deleted.
        #expect(try await store.trimConversation(stream: "alice", conversation: .user("bob"), keep: 4, limit: 100) == 6)
        #expect(try await store.size().messages == 6)
        #expect(try await store.trimConversation(stream: "bob", conversation: .user("nobody"), keep: 0, limit: 100) == 0)
    }
}
