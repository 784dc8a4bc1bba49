@testable import IMArchive
import Testing

@Suite("KnownBounds")
struct KnownBoundsTests {
    @Test("a stream is known once read; commits raise its last offset; a deletion forgets the rest until read again")
    func streams() {
        var known = KnownBounds()
        #expect(known.bounds(of: "bob") == nil)
        known.appended(3, to: "bob")
        #expect(known.bounds(of: "bob") == nil, "a commit alone does not tell the first offset")
        known.read(StreamBounds(last: 2, first: 1), of: "bob", since: known.generation)
        #expect(known.bounds(of: "bob") == StreamBounds(last: 3, first: 1), "what was committed meanwhile is kept")
        known.appended(4, to: "bob")
        known.appended(2, to: "bob")
        #expect(known.bounds(of: "bob") == StreamBounds(last: 4, first: 1), "never lowered")
        known.deleted()
        #expect(known.bounds(of: "bob") == nil)
        known.read(StreamBounds(last: 4, first: 3, trimmedThrough: 2), of: "bob", since: known.generation)
        #expect(known.bounds(of: "bob") == StreamBounds(last: 4, first: 3, trimmedThrough: 2))
    }

    @Test("a read that started before a deletion is not taken")
    func staleRead() {
        var known = KnownBounds()
        let started = known.generation
        known.deleted()
        known.read(StreamBounds(last: 5, first: 1), of: "bob", since: started)
        #expect(known.bounds(of: "bob") == nil)
        known.read(position: 4, user: "bob", device: "phone", since: started)
        #expect(known.position(user: "bob", device: "phone") == nil)
    }

    @Test("an empty stream read before a commit: its first offset is the one the commit gave")
    func emptyStream() {
        var known = KnownBounds()
        let started = known.generation
        known.appended(1, to: "carol")
        known.read(.empty, of: "carol", since: started)
        #expect(known.bounds(of: "carol") == StreamBounds(last: 1, first: 1))
    }

    @Test("positions: known once read (none saved is known too), saves keep the highest, erasure forgets the user's")
    func positions() {
        var known = KnownBounds()
        known.saved(DevicePosition(user: "bob", device: "phone", offset: 5))
        #expect(known.position(user: "bob", device: "phone") == nil, "a save alone does not say the store has nothing higher")
        known.read(position: 3, user: "bob", device: "phone", since: known.generation)
        #expect(known.position(user: "bob", device: "phone") == .some(5))
        known.saved(DevicePosition(user: "bob", device: "phone", offset: 4))
        #expect(known.position(user: "bob", device: "phone") == .some(5))
        known.read(position: nil, user: "bob", device: "tablet", since: known.generation)
        #expect(known.position(user: "bob", device: "tablet") == .some(nil))
        known.read(position: 7, user: "alice", device: "phone", since: known.generation)
        known.erased("bob")
        #expect(known.position(user: "bob", device: "phone") == nil && known.position(user: "bob", device: "tablet") == nil)
        #expect(known.position(user: "alice", device: "phone") == .some(7))
    }
}
