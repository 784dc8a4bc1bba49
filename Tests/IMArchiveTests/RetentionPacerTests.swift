@testable import IMArchive
import Testing

@Suite("RetentionPacer")
struct RetentionPacerTests {
    @Test("while chats are committed, deleting takes at most its share of the time; when none is, it goes on after a short pause")
    func pauses() {
        var pacer = RetentionPacer(share: 0.05)
        // The first transaction: nothing to compare with yet.
        #expect(pacer.pause(after: 30_000_000, commits: 10) == RetentionPacer.idlePause)
        // Chats were committed meanwhile: 30 ms of deleting, then 570 ms for the chats (5%).
        #expect(pacer.pause(after: 30_000_000, commits: 25) == .milliseconds(570))
        // No commit since: the store is idle, deleting goes on.
        #expect(pacer.pause(after: 30_000_000, commits: 25) == RetentionPacer.idlePause)
        #expect(pacer.pause(after: 1_000, commits: 26) == RetentionPacer.idlePause, "never shorter than the idle pause")
        var all = RetentionPacer(share: 1)
        _ = all.pause(after: 1, commits: 0)
        #expect(all.pause(after: 30_000_000, commits: 1) == RetentionPacer.idlePause, "a share of 1 never waits longer")
        var stuck = RetentionPacer(share: 0.05)
        _ = stuck.pause(after: 1, commits: 0)
        #expect(stuck.pause(after: 10_000_000_000, commits: 1) == .seconds(60), "a pause is at most a minute")
    }
}
