import Testing

@testable import IMGateway

@Suite("RecentKeys")
struct RecentKeysTests {
    @Test("a key is new once; past the capacity the oldest is forgotten and counts as new again")
    func window() {
        var recent = RecentKeys(capacity: 3)
        let first = ["a", "b", "c"].map { recent.insert($0) }
        #expect(first == [true, true, true])
        let again = ["a", "c"].map { recent.insert($0) }
        #expect(again == [false, false], "remembered")
        let fourth = recent.insert("d")
        #expect(fourth, "a new key")
        #expect(!recent.contains("a") && recent.contains("b") && recent.contains("d"), "a, the oldest, was forgotten")
        let back = recent.insert("a")
        #expect(back, "forgotten, so new again")
        #expect(!recent.contains("b"))
    }
}
