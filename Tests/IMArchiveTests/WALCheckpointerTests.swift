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
}
