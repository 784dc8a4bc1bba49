import Foundation
import GRDB
import IMClient
import IMGateway
import IMWire
import Testing
import IMTestSupport

/// History on every device (PROTOCOL.md 6.15-6.17) through a real imgw, on each store: a new
/// device pages through a long conversation, a group member added later sees from the join
/// on, read markers follow the user from device to device, bad requests are refused clearly.
@Suite("History, conversations and read markers", .stopsWhatItStarts, .serialized, .timeLimit(.minutes(4)))
struct HistoryTests {
    enum Store: String, CaseIterable, Sendable { case sqlite, postgres }

    /// A broker and an imgw with the server API and an archive of `store`.
    static func gateway(_ store: Store) async throws -> IMGWProcess {
        let broker = try await TestBroker.start()
        switch store {
        case .sqlite:
            return try await IMGWProcess.start(broker: broker, api: true)
        case .postgres:
            let postgres = try await TestPostgres.start()
            return try await IMGWProcess.start(broker: broker, api: true, archive: .postgres(postgres.url))
        }
    }

    static func client(_ gateway: IMGWProcess, _ user: String, _ device: String) async throws -> IMClient {
        let token = try await TokenMinter(secret: IMGWProcess.secret).mint(user: user)
        return tracked(try await IMClient.connect(.init(port: gateway.port, token: token, deviceID: device)))
    }

    @Test("a new device pages through 1,000 messages (50 a page, complete on the last) in order; the conversation list shows them unread; a bad LIMIT is refused", arguments: Store.allCases)
    func pagesThrough(_ store: Store) async throws {
        let gateway = try await Self.gateway(store)
        let alice = try await gateway.device("alice")
        let ids = (0..<1_000).map { "a-\($0)" }
        let acks = try await alice.chatMany(to: "bob", ids: ids, text: "hello bob", window: 64, within: 60)
        #expect(acks.count == 1_000 && acks.values.allSatisfy { $0.error == nil })

        let tablet = try await Self.client(gateway, "bob", "tablet")
        var pages: [IMClient.HistoryPage] = []
        for try await page in tablet.historyPages(of: .user("alice"), pageSize: 50) { pages.append(page) }
        #expect(pages.count == 20 && pages.map(\.messages.count).allSatisfy { $0 == 50 })
        #expect(pages.dropLast().allSatisfy { !$0.complete } && pages.last?.complete == true)
        let messages = pages.reversed().flatMap(\.messages)
        #expect(messages.map(\.messageID) == ids, "in the order sent, each once")
        #expect(messages.allSatisfy { $0.from == "alice" && $0.text == "hello bob" && !$0.isCarbon })
        let offsets = messages.compactMap(\.streamOffset)
        #expect(offsets.count == 1_000 && offsets == offsets.sorted())
        // Forward from an offset.
        let forward = try await tablet.history(of: .user("alice"), position: .after(offsets[989]), limit: 200)
        #expect(forward.messages.map(\.messageID) == Array(ids.suffix(10)) && forward.complete)
        // alice's side: her own messages, as carbons naming bob.
        let aliceClient = try await Self.client(gateway, "alice", "laptop")
        let own = try await aliceClient.history(of: .user("bob"), limit: 3)
        #expect(own.messages.map(\.messageID) == Array(ids.suffix(3)) && own.messages.allSatisfy { $0.isCarbon && $0.to == "bob" })

        let list = try await tablet.conversations()
        #expect(list.complete && list.lines.count == 1)
        #expect(list.lines.first?.conversation == .user("alice") && list.lines.first?.unread == 1_000)
        #expect(list.lines.first?.last?.messageID == "a-999" && list.lines.first?.lastOffset == offsets.last)

        await #expect(throws: IMClientError.refused(.badRequest, "LIMIT must be 1-200, not 201")) {
            _ = try await tablet.history(of: .user("alice"), limit: 201)
        }
        // A position past the end is an empty, complete page; nothing else is disturbed.
        let beyond = try await tablet.history(of: .user("alice"), position: .after(1_000_000))
        #expect(beyond.messages.isEmpty && beyond.complete)
        #expect(try await tablet.history(of: .user("alice"), limit: 1).messages.first?.messageID == "a-999")
        await alice.drop()
    }

    @Test("a member added later sees the group's history from the join on; a non-member is FORBIDDEN", arguments: Store.allCases)
    func groupFromJoin(_ store: Store) async throws {
        let gateway = try await Self.gateway(store)
        #expect(try await GroupTests.api(gateway, "POST", "/v1/groups/team", #"{"members":["alice","bob"]}"#).status == 201)
        let alice = try await gateway.device("alice")
        #expect(try await alice.groupChat("team", id: "g-1", text: "one").error == nil)
        #expect(try await alice.groupChat("team", id: "g-2", text: "two").error == nil)
        #expect(try await GroupTests.api(gateway, "PUT", "/v1/groups/team/members/dave").status == 200)
        // The gateway's membership cache follows the broker: alice's next chat reaches dave.
        let deadline = ContinuousClock.now + .seconds(10)
        let dave = try await Self.client(gateway, "dave", "phone")
        var sent = 3
        while true {
            #expect(try await alice.groupChat("team", id: "g-\(sent)", text: "after").error == nil)
            if try await dave.history(of: .group("team")).messages.isEmpty == false { break }
            guard ContinuousClock.now < deadline else { throw TestError("dave never got a group message") }
            sent += 1
        }
        let history = try await dave.history(of: .group("team"))
        #expect(history.complete && history.messages.map(\.messageID) == ["g-\(sent)"], "\(history.messages.map(\.messageID))")
        let bob = try await Self.client(gateway, "bob", "phone")
        let all = try await bob.history(of: .group("team"))
        #expect(all.messages.map(\.messageID) == ["g-1", "g-2"] + (3...sent).map { "g-\($0)" } && all.messages.allSatisfy { $0.group == "team" })
        let mallory = try await Self.client(gateway, "mallory", "phone")
        await #expect(throws: IMClientError.refused(.forbidden, "mallory is not a member of team")) {
            _ = try await mallory.history(of: .group("team"))
        }
        await alice.drop()
    }

    @Test("read on the phone: the laptop online learns it within 1 s and its unread count is 0; a device logging in later sees 0; markers past the end or in no conversation are refused", arguments: Store.allCases)
    func readMarkers(_ store: Store) async throws {
        let gateway = try await Self.gateway(store)
        let alice = try await gateway.device("alice")
        let acks = try await alice.chatMany(to: "bob", ids: (1...5).map { "m-\($0)" }, text: "read me")
        #expect(acks.values.allSatisfy { $0.error == nil })
        let phone = try await Self.client(gateway, "bob", "phone")
        let laptop = try await Self.client(gateway, "bob", "laptop")
        let laptopEvents = Collector(laptop.events)
        #expect(try await laptop.conversations().lines.first?.unread == 5)

        let newest = try #require(try await phone.history(of: .user("alice"), limit: 1).messages.first?.streamOffset)
        let marked = try await phone.markRead(.user("alice"), through: newest)
        #expect(marked == IMClient.ReadMarker(conversation: .user("alice"), readThrough: newest, unread: 0))
        // Stored once acknowledged; from there to the laptop.
        let started = ContinuousClock.now
        var told: IMClient.ReadMarker?
        while told == nil {
            if case .readMarker(let marker) = try await laptopEvents.next(within: 2, "the read marker") { told = marker }
        }
        #expect(ContinuousClock.now - started < .seconds(1), "within 1 s: \(ContinuousClock.now - started)")
        #expect(told == IMClient.ReadMarker(conversation: .user("alice"), readThrough: newest, unread: 0))
        #expect(try await laptop.conversations().lines.first?.unread == 0)
        // A device that was offline: its first look shows the marker.
        let desk = try await Self.client(gateway, "bob", "desk")
        let line = try #require(try await desk.conversations().lines.first)
        #expect(line.unread == 0 && line.readThrough == newest)
        // A message after the marker is unread everywhere.
        #expect(try await alice.chat(to: "bob", id: "m-6", text: "one more").error == nil)
        #expect(try await desk.conversations().lines.first?.unread == 1)

        await #expect(throws: IMClientError.self) { _ = try await phone.markRead(.user("alice"), through: newest + 100) }
        await #expect(throws: IMClientError.refused(.badRequest, "no message in the conversation with user zed to mark read")) {
            _ = try await phone.markRead(.user("zed"), through: 1)
        }
        // A marker never moves back.
        #expect(try await phone.markRead(.user("alice"), through: 1).readThrough == newest)
        await alice.drop()
    }

    @Test("a delete reaches an online recipient, an offline one at its next login and the sender's other device, as a tombstone; history shows it deleted; an unknown id, or another's message, is refused", arguments: Store.allCases)
    func deletes(_ store: Store) async throws {
        let gateway = try await Self.gateway(store)
        let alicePhone = try await Self.client(gateway, "alice", "phone")
        let aliceLaptop = try await Self.client(gateway, "alice", "laptop")
        let laptopEvents = Collector(aliceLaptop.events)
        let bobPhone = try await Self.client(gateway, "bob", "phone")
        let phoneEvents = Collector(bobPhone.events)
        let tablet = try await Self.client(gateway, "bob", "tablet")
        let tabletEvents = Collector(tablet.events)

        let sent = try await alicePhone.send(to: "bob", text: "oops, wrong chat")
        try await alicePhone.send(to: "bob", text: "this one stays")
        #expect(try await nextMessage(tabletEvents).text == "oops, wrong chat")
        #expect(try await nextMessage(tabletEvents).text == "this one stays")
        await tablet.close()

        let deletedAt = try await alicePhone.delete(messageID: sent.messageID)
        #expect(deletedAt > 0)
        #expect(try await alicePhone.delete(messageID: sent.messageID) == deletedAt, "deleting again: the same deletion")
        let online = try await Self.nextDeletion(phoneEvents)
        #expect(online.from == "alice" && online.messageID == sent.messageID && online.deletedAt == deletedAt && !online.isCarbon)
        let carbon = try await Self.nextDeletion(laptopEvents)
        #expect(carbon.messageID == sent.messageID && carbon.isCarbon && carbon.to == "bob")
        // The tablet was away: the tombstone comes with its catch-up.
        let back = try await Self.client(gateway, "bob", "tablet")
        let backEvents = Collector(back.events)
        let later = try await Self.nextDeletion(backEvents)
        #expect(later.messageID == sent.messageID && later.from == "alice")

        let history = try await back.history(of: .user("alice"))
        #expect(history.messages.map(\.messageID).count == 2)
        let gone = try #require(history.messages.first { $0.messageID == sent.messageID })
        #expect(gone.isDeleted && gone.text == "" && gone.serverTime == deletedAt)
        #expect(history.messages.last?.text == "this one stays" && history.messages.last?.isDeleted == false)

        await #expect(throws: IMClientError.refused(.badRequest, "no message nope of alice is stored")) {
            try await alicePhone.delete(messageID: "nope")
        }
        await #expect(throws: IMClientError.refused(.badRequest, "no message \(sent.messageID) of bob is stored"),
                      "bob cannot delete alice's message: under his name there is none") {
            try await bobPhone.delete(messageID: sent.messageID)
        }
    }

    /// The next deletion among a client's events (other events skipped).
    static func nextDeletion(_ events: Collector<IMClient.Event>) async throws -> IMClient.Deletion {
        while true {
            if case .deleted(let deletion) = try await events.next(within: 10, "a deletion") { return deletion }
        }
    }

    @Test("imcli: history, conversations, read, delete against a real imgw; a bad LIMIT exits 1, a marker past the end exits 2")
    func cli() async throws {
        let gateway = try await Self.gateway(.sqlite)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let port = ["--port", String(gateway.port)]
        func imcli(_ user: String, _ arguments: [String]) async throws -> (status: Int32, output: String) {
            try await IMClientIntegrationTests.runCLI(arguments + ["--token", try await minter.mint(user: user)] + port)
        }
        for (index, text) in ["first", "second", "third"].enumerated() {
            let sent = try await imcli("alice", ["send", "--to", "bob", "--id", "h-\(index + 1)", text])
            #expect(sent.status == 0, "\(sent.output)")
        }
        let history = try await imcli("bob", ["history", "--with", "alice"])
        #expect(history.status == 0 && history.output.contains("alice: first") && history.output.contains("alice: third"), "\(history.output)")
        let page = try await imcli("bob", ["history", "--with", "alice", "--limit", "2", "--json"])
        let ids = page.output.split(separator: "\n").compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["id"] as? String
        }
        #expect(ids == ["h-2", "h-3"], "\(page.output)")
        let list = try await imcli("bob", ["conversations"])
        #expect(list.status == 0 && list.output.contains("alice (3 unread) alice: third"), "\(list.output)")
        let read = try await imcli("bob", ["read", "--with", "alice"])
        #expect(read.status == 0, "\(read.output)")
        #expect(try await imcli("bob", ["conversations"]).output.contains("alice alice: third"))
        let deleted = try await imcli("alice", ["delete", "h-3"])
        #expect(deleted.status == 0 && deleted.output.contains("deleted h-3 for everyone"), "\(deleted.output)")
        let after = try await imcli("bob", ["history", "--with", "alice"])
        #expect(after.output.contains("alice: [deleted]") && !after.output.contains("third"), "\(after.output)")

        let badLimit = try await imcli("bob", ["history", "--with", "alice", "--limit", "500"])
        #expect(badLimit.status == 1 && badLimit.output.contains("--limit must be 1-200"), "\(badLimit.output)")
        let pastEnd = try await imcli("bob", ["read", "--with", "alice", "9999"])
        #expect(pastEnd.status == 2 && pastEnd.output.contains("BAD_REQUEST"), "\(pastEnd.output)")
    }

    @Test("the server API: a user's history and conversations; erasing a user leaves nothing of what they sent in the store, their stream and list gone, others' histories showing it deleted", arguments: Store.allCases)
    func apiAndErasure(_ store: Store) async throws {
        let broker = try await TestBroker.start()
        let postgres = store == .postgres ? try await TestPostgres.start() : nil
        let file = broker.directory.appendingPathComponent("erase.sqlite").path
        let gateway = try await IMGWProcess.start(broker: broker, api: true, archive: postgres.map { .postgres($0.url) } ?? .sqliteFile(file))
        /// How many stored bodies hold `text`, read from the store itself.
        func bodies(containing text: String) async throws -> Int {
            if let postgres {
                let out = try await postgres.client("psql", postgres.psqlArguments + [
                    "-At", "-c", "SELECT count(*) FROM imgw_message WHERE position('\(text)' in convert_from(body, 'UTF8')) > 0",
                ])
                return Int(out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
            }
            let queue = try DatabaseQueue(path: file)
            defer { try? queue.close() }
            return try await queue.read { db in
                try Int.fetchOne(db, sql: "SELECT count(*) FROM message WHERE instr(CAST(body AS TEXT), ?) > 0", arguments: [text]) ?? -1
            }
        }
        let carol = try await gateway.device("carol")
        let bob = try await gateway.device("bob", device: "phone")
        #expect(try await carol.chat(to: "bob", id: "c-1", text: "carol's secret one").error == nil)
        #expect(try await carol.chat(to: "bob", id: "c-2", text: "carol's secret two").error == nil)
        #expect(try await bob.chat(to: "carol", id: "b-1", text: "bob's answer").error == nil)
        await carol.drop()
        await bob.drop()

        let history = try await ServerAPITests.call(gateway, "GET", "/v1/users/bob/history/with/carol?limit=2")
        #expect(history.status == 200, "\(history.body)")
        let messages = history.json?["messages"] as? [[String: Any]] ?? []
        #expect(messages.compactMap { $0["id"] as? String } == ["c-2", "b-1"] && history.json?["complete"] as? Bool == false)
        #expect(messages.last?["carbon"] as? Bool == true && messages.last?["to"] as? String == "carol")
        let list = try await ServerAPITests.call(gateway, "GET", "/v1/users/bob/conversations")
        let line = (list.json?["conversations"] as? [[String: Any]])?.first
        #expect(list.status == 200 && line?["with"] as? String == "carol" && line?["unread"] as? Int == 0, "\(list.body)")
        let between = try await ServerAPITests.call(gateway, "GET", "/v1/users/bob/history/with/carol?after=0&before=2")
        #expect((between.json?["messages"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == ["c-1"] && between.json?["complete"] as? Bool == true,
                "\(between.body)")
        #expect(try await ServerAPITests.call(gateway, "GET", "/v1/users/bob/history/with/carol?limit=201").status == 400)
        #expect(try await ServerAPITests.call(gateway, "GET", "/v1/users/bob/history/group/team").json?["messages"] as? [Any] != nil)
        #expect(try await bodies(containing: "secret") == 2)

        let erased = try await ServerAPITests.call(gateway, "DELETE", "/v1/users/carol")
        #expect(erased.status == 200 && erased.json?["messages_erased"] as? Int == 2 && erased.json?["entries_removed"] as? Int == 3, "\(erased.body)")
        #expect(try await bodies(containing: "secret") == 0, "nothing carol sent is left in the store")
        let after = try await ServerAPITests.call(gateway, "GET", "/v1/users/bob/history/with/carol")
        let shown = after.json?["messages"] as? [[String: Any]] ?? []
        #expect(shown.count == 3 && shown.prefix(2).allSatisfy { $0["deleted"] as? Bool == true && $0["text"] == nil }, "\(after.body)")
        let carolList = try await ServerAPITests.call(gateway, "GET", "/v1/users/carol/conversations")
        #expect((carolList.json?["conversations"] as? [Any])?.isEmpty == true, "\(carolList.body)")
        let carolHistory = try await ServerAPITests.call(gateway, "GET", "/v1/users/carol/history/with/bob")
        #expect((carolHistory.json?["messages"] as? [Any])?.isEmpty == true)
        let again = try await ServerAPITests.call(gateway, "DELETE", "/v1/users/carol")
        #expect(again.json?["messages_erased"] as? Int == 0 && again.json?["entries_removed"] as? Int == 0)
    }

    @Test("the server API without an archive: 501 no_archive")
    func apiWithoutArchive() async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, api: true, archive: .none)
        for (method, path) in [("GET", "/v1/users/bob/history/with/carol"), ("GET", "/v1/users/bob/conversations"), ("DELETE", "/v1/users/bob")] {
            let answer = try await ServerAPITests.call(gateway, method, path)
            #expect(answer.status == 501 && answer.json?["error"] as? String == "no_archive", "\(method) \(path): \(answer.body)")
        }
    }
}
