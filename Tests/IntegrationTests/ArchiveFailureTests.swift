import Foundation
import IMArchive
import IMGateway
import IMWire
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// When the message archive cannot store, chats are refused with a time to retry and nothing is
/// ACKed that is not stored; the gateway takes them again by itself once the store is back
/// (docs/OPERATIONS.md, "The message archive").
@Suite("The archive cannot write: chats are refused, never ACKed unstored, and taken again once it can", .stopsWhatItStarts, .serialized,
       .timeLimit(.minutes(3)))
struct ArchiveFailureTests {
    /// A small tmpfs mounted for one test (root only: CI runs as root), unmounted after it.
    final class SmallDisk: Sendable {
        let path: String

        init(megabytes: Int) throws {
            path = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-full-\(UUID().uuidString.prefix(8))").path
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            guard mount("tmpfs", path, "tmpfs", 0, "size=\(megabytes)m") == 0 else {
                let reason = String(cString: strerror(errno))
                try? FileManager.default.removeItem(atPath: path)
                throw TestError("cannot mount a tmpfs at \(path): \(reason)")
            }
        }

        var filler: String { path + "/filler" }

        /// Fills what is left with a file.
        func fill() throws {
            let descriptor = open(filler, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { throw TestError("cannot create \(filler)") }
            defer { close(descriptor) }
            let block = [UInt8](repeating: 0, count: 64 * 1024)
            while block.withUnsafeBytes({ Glibc.write(descriptor, $0.baseAddress, $0.count) }) > 0 {}
        }

        func free() { unlink(filler) }

        func unmount() {
            umount2(path, Int32(MNT_DETACH))
            try? FileManager.default.removeItem(atPath: path)
        }
    }

    /// What a chat came to.
    enum Outcome: Equatable {
        case acked
        case refused(retryAfter: UInt32?)
    }

    @Test("the SQLite file's disk is full: STORE_UNAVAILABLE with RETRY_AFTER, no ACK for what is not stored, and chats are taken again once there is room",
          .enabled(if: geteuid() == 0, "mounting a small tmpfs needs root"))
    func diskFull() async throws {
        let disk = try SmallDisk(megabytes: 4)
        defer { disk.unmount() }
        let file = disk.path + "/archive.sqlite"
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, archive: .sqliteFile(file))
        let bob = try await gateway.device("bob")
        try await bob.send(.logout(Logout()))
        _ = try await bob.next(within: 10, "the LOGOUT ack")
        let alice = try await gateway.device("alice")
        // Bodies of 2 KiB: the archive needs room soon after the disk is full.
        let text = String(repeating: "x", count: 2_048)
        var outcomes: [String: Outcome] = [:]
        var order: [String] = []
        func chat(_ id: String) async throws -> Outcome {
            let ack = try await alice.chat(to: "bob", id: id, text: text)
            if ack.error == nil { return .acked }
            #expect(ack.error == .storeUnavailable, "\(id): \(ack)")
            return .refused(retryAfter: ack.retryAfter)
        }
        for index in 0..<20 {
            let id = "before-\(index)"
            outcomes[id] = try await chat(id)
            order.append(id)
        }
        #expect(outcomes.values.allSatisfy { $0 == .acked })
        try disk.fill()
        // Until the archive can no longer grow: the first refusal.
        var firstRefused: String?
        for index in 0..<2_000 where firstRefused == nil {
            let id = "full-\(index)"
            let outcome = try await chat(id)
            outcomes[id] = outcome
            order.append(id)
            if case .refused(let retry) = outcome {
                firstRefused = id
                #expect(retry != nil && retry! >= 1 && retry! <= 8_000, "RETRY_AFTER \(String(describing: retry))")
            }
        }
        let refused = try #require(firstRefused, "the archive never ran out of room")
        // The next ones are refused too (the store is unavailable, and this connection holds
        // chats until the refused one comes again).
        for index in 0..<5 {
            let id = "held-\(index)"
            let outcome = try await chat(id)
            #expect(outcome != .acked, "\(id) ACKed while the disk is full")
            outcomes[id] = outcome
        }
        #expect(try await gateway.metric("imgw_archive_available") == 0)
        #expect(gateway.output.text.withLock { $0 }.contains("the message archive cannot store messages"))

        // Room again: the refused message, sent again after its retry time, is taken, and the
        // ones after it.
        disk.free()
        var retaken: Outcome = .refused(retryAfter: nil)
        for _ in 0..<40 where retaken != .acked {
            if case .refused(let retry) = retaken { try await Task.sleep(for: .milliseconds(Int(retry ?? 250))) }
            retaken = try await chat(refused)
        }
        #expect(retaken == .acked, "the store came back, the message was still refused")
        outcomes[refused] = .acked
        for index in 0..<5 {
            let id = "held-\(index)"
            outcomes[id] = try await chat(id)
            #expect(outcomes[id] == .acked)
        }
        #expect(try await gateway.metric("imgw_archive_available") == 1)

        // Every ACKed message is in the archive; none refused for good is.
        let store = try SQLiteArchiveStore.open(path: file)
        let stored = Set(try await store.read(stream: "bob", after: 0, through: .max, limit: 10_000).map(\.messageID))
        await store.close()
        let acked = Set(outcomes.filter { $0.value == .acked }.keys)
        #expect(acked.isSubset(of: stored), "ACKed, not stored: \(acked.subtracting(stored).sorted())")
        #expect(stored.isSubset(of: acked), "stored, never ACKed: \(stored.subtracting(acked).sorted())")
        // And bob gets exactly those, in the order they were taken.
        let (again, _) = try await gateway.login("bob")
        var received: [String] = []
        while received.count < stored.count {
            received.append(try await again.nextDelivery(within: 10, "bob's delivery \(received.count + 1) of \(stored.count)").messageID)
        }
        #expect(Set(received) == stored && received.count == stored.count)
        await gateway.stop()
    }
}
