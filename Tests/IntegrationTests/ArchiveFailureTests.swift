import Foundation
import IMArchive
import IMGateway
import IMWire
import Testing

#if canImport(Glibc)
import Glibc
import IMTestSupport
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
        // Bodies of 2 KiB: the archive needs room soon after the disk is full.
        try await refusedUntilRepaired(file: disk.path + "/archive.sqlite", text: String(repeating: "x", count: 2_048),
                                       breakStore: { try disk.fill() }, repair: { disk.free() })
    }

    @Test("the SQLite file made unwritable (immutable, which binds root too): the same, and taken again once it is writable",
          .enabled(if: geteuid() == 0, "setting a file immutable needs root"))
    func unwritable() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-ro-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let file = directory + "/archive.sqlite"
        let files = [file, file + "-wal"]
        defer {
            for path in files { try? Self.setImmutable(path, false) }
            try? FileManager.default.removeItem(atPath: directory)
        }
        try await refusedUntilRepaired(file: file, text: "hi",
                                       breakStore: { for path in files { try Self.setImmutable(path, true) } },
                                       repair: { for path in files { try? Self.setImmutable(path, false) } })
    }

    /// Sets or clears a file's immutable attribute (chattr +i / -i).
    static func setImmutable(_ path: String, _ immutable: Bool) throws {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw TestError("cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        // FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_IMMUTABLE_FL (linux/fs.h).
        var flags = 0
        guard ioctl(descriptor, 0x8008_6601, &flags) == 0 else { throw TestError("FS_IOC_GETFLAGS \(path): \(String(cString: strerror(errno)))") }
        flags = immutable ? flags | 0x10 : flags & ~0x10
        guard ioctl(descriptor, 0x4008_6602, &flags) == 0 else { throw TestError("FS_IOC_SETFLAGS \(path): \(String(cString: strerror(errno)))") }
    }

    /// A gateway on a SQLite archive at `file`: chats are ACKed, then the store is broken:
    /// the first refusal carries STORE_UNAVAILABLE and RETRY_AFTER, what follows is refused,
    /// the metric and the log say so; once repaired, the refused message sent again is taken,
    /// and so are the ones after it; exactly what was ACKed is stored, and bob gets exactly that.
    func refusedUntilRepaired(file: String, text: String, breakStore: () throws -> Void, repair: () -> Void) async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, archive: .sqliteFile(file))
        let bob = try await gateway.device("bob")
        try await bob.send(.logout(Logout()))
        _ = try await bob.next(within: 10, "the LOGOUT ack")
        let alice = try await gateway.device("alice")
        var outcomes: [String: Outcome] = [:]
        func chat(_ id: String) async throws -> Outcome {
            let ack = try await alice.chat(to: "bob", id: id, text: text)
            if ack.error == nil { return .acked }
            #expect(ack.error == .storeUnavailable, "\(id): \(ack)")
            return .refused(retryAfter: ack.retryAfter)
        }
        for index in 0..<20 {
            let id = "before-\(index)"
            outcomes[id] = try await chat(id)
        }
        #expect(outcomes.values.allSatisfy { $0 == .acked })
        try breakStore()
        // Until the archive can no longer write: the first refusal.
        var firstRefused: String?
        for index in 0..<2_000 where firstRefused == nil {
            let id = "broken-\(index)"
            let outcome = try await chat(id)
            outcomes[id] = outcome
            if case .refused(let retry) = outcome {
                firstRefused = id
                #expect(retry != nil && retry! >= 1 && retry! <= 8_000, "RETRY_AFTER \(String(describing: retry))")
            }
        }
        let refused = try #require(firstRefused, "the archive never failed to write")
        // The next ones are refused too (the store is unavailable, and this connection holds
        // chats until the refused one comes again).
        for index in 0..<5 {
            let id = "held-\(index)"
            let outcome = try await chat(id)
            #expect(outcome != .acked, "\(id) ACKed while the store cannot write")
            outcomes[id] = outcome
        }
        // (Not imgw_archive_available: it is 1 again once the retry time has passed, until the
        // next commit fails, and a loaded machine can take that long to get here.)
        #expect(try await gateway.metric("imgw_archive_failed_commits_total") >= 1)
        #expect(gateway.output.text.withLock { $0 }.contains("the message archive cannot store messages"))

        // Repaired: the refused message, sent again after its retry time, is taken, and the
        // ones after it.
        repair()
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
        // And bob gets exactly those, once each.
        let (again, _) = try await gateway.login("bob")
        var received: [String] = []
        while received.count < stored.count {
            received.append(try await again.nextDelivery(within: 10, "bob's delivery \(received.count + 1) of \(stored.count)").messageID)
        }
        #expect(Set(received) == stored && received.count == stored.count)
        await gateway.stop()
    }
}
