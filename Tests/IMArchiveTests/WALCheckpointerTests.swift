import Foundation
@testable import IMArchive
import Logging
import Testing

@Suite("SQLite WAL checkpoints, off the writer's path")
struct WALCheckpointerTests {
    @Test("under commits without pause, the writer finishes the checkpointer's copies and the WAL starts over again and again")
    func walStartsOver() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let store = try SQLiteArchiveStore.open(path: scratch.path)
        let archive = MessageArchive(store: store, settings: .init(retention: nil), logger: Logger(label: "test"))
        let writer = Task { await archive.run() }
        defer { writer.cancel() }
        let wal = scratch.path + "-wal"
        func walBytes() -> Int { ((try? FileManager.default.attributesOfItem(atPath: wal))?[.size] as? NSNumber)?.intValue ?? 0 }

        // Eight senders to eight users, 16,000 messages in small commits: without the
        // checkpointer, the WAL would take every page they write (a few per message).
        var largest = 0
        for round in 0..<4 {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for sender in 0..<8 {
                    group.addTask {
                        for index in 0..<500 {
                            _ = try await archive.append(chat("s\(sender)", "m-\(round)-\(index)", to: ["r\(sender)"], text: String(repeating: "x", count: 200)))
                        }
                    }
                }
                try await group.waitForAll()
            }
            largest = max(largest, walBytes())
        }
        #expect(archive.statistics.stored.load(ordering: .relaxed) == 16_000)
        #expect(largest > 0, "the archive is in WAL mode")
        // Each finished checkpoint lets the WAL start over; without the writer's part none
        // would (a commit always comes during the checkpointer's copy).
        let checkpoints = store.checkpoints
        #expect(checkpoints.finished >= 3, "\(checkpoints); the WAL reached \(largest) bytes")
        writer.cancel()
        await writer.value
    }

    @Test("an idle archive wakes no thread: the checkpoints stop after the last commit's (which copies it back) and start again with the next")
    func idleTimerStops() async throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let store = try SQLiteArchiveStore.open(path: scratch.path)
        #expect(store.checkpointTimer == (false, 0), "nothing committed, nothing scheduled")
        _ = try await store.commit([chat("alice", "m-1", to: ["bob"])], positions: [])
        #expect(store.checkpointTimer.running)
        // The timer's own stop is the event: polled, bounded.
        func whenStopped() async throws -> Int {
            for _ in 0..<500 {
                let timer = store.checkpointTimer
                if !timer.running { return timer.runs }
                try await Task.sleep(for: .milliseconds(10))
            }
            Issue.record("the checkpoint timer still runs 5 s after the last commit")
            return -1
        }
        let runs = try await whenStopped()
        #expect(runs >= 1, "the last commit's frames were copied back")
        // Idle for six intervals: no checkpoint ran.
        try await Task.sleep(for: .milliseconds(300))
        #expect(store.checkpointTimer == (false, runs))
        _ = try await store.commit([chat("alice", "m-2", to: ["bob"])], positions: [])
        #expect(store.checkpointTimer.running, "a commit starts it again")
        #expect(try await whenStopped() > runs)
        await store.close()
    }
}
