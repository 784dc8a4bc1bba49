@testable import IMGateway
import Testing

@Suite("PresenceMemory")
struct PresenceMemoryTests {
    static func online(_ device: String, _ ts: UInt64) -> PresencePayload { PresencePayload(status: .online, device: device, ts: ts) }

    @Test("the same status and time are told once per device and user; a new time or status is news")
    func repeats() {
        var memory = PresenceMemory()
        let news = [
            memory.isNews(user: "bob", Self.online("laptop", 1)),
            memory.isNews(user: "bob", Self.online("laptop", 1)),
            memory.isNews(user: "bob", Self.online("phone", 1)), // another device
            memory.isNews(user: "carol", Self.online("laptop", 1)), // another user
            memory.isNews(user: "bob", PresencePayload(status: .offline, device: "laptop", ts: 1)), // another status
            memory.isNews(user: "bob", Self.online("laptop", 2)), // another time
        ]
        #expect(news == [true, false, true, true, true, true])
        #expect(memory.count == 3)
    }

    @Test("forgetting a user tells its devices' presence again, and only theirs")
    func forget() {
        var memory = PresenceMemory()
        _ = memory.isNews(user: "bob", Self.online("laptop", 1))
        _ = memory.isNews(user: "bob", Self.online("phone", 1))
        _ = memory.isNews(user: "carol", Self.online("laptop", 1))
        memory.forget(users: ["bob", "nobody"])
        #expect(memory.count == 1)
        let news = [memory.isNews(user: "bob", Self.online("laptop", 1)), memory.isNews(user: "carol", Self.online("laptop", 1))]
        #expect(news == [true, false])
    }

    @Test("past its capacity it forgets everything instead of growing")
    func bounded() {
        var memory = PresenceMemory()
        for device in 0..<PresenceMemory.capacity { _ = memory.isNews(user: "bob", Self.online("d\(device)", 1)) }
        #expect(memory.count == PresenceMemory.capacity)
        let full = memory.isNews(user: "bob", Self.online("d0", 1))
        let past = memory.isNews(user: "bob", Self.online("one-more", 1))
        #expect(!full && past)
        #expect(memory.count == 1)
        let forgotten = memory.isNews(user: "bob", Self.online("d0", 1))
        #expect(forgotten)
    }
}
