@testable import IMGateway
import Foundation
import IMArchive
import IMWire
import Logging
import Mosquitto
import Testing

/// ``DeviceConnection`` with a message archive (a SQLite file) and the device's own chats: the
/// offsets they take in the device's own stream, and the deliveries around them.
extension DeviceConnectionTests {
    /// Runs `body` with an archive over a fresh SQLite file, then stops it and removes the file.
    static func withArchive(_ body: (MessageArchive) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-device-archive-\(UInt64.random(in: 0...UInt64.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var logger = Logger(label: "device-connection-archive-test")
        logger.logLevel = .critical
        let store = try SQLiteArchiveStore.open(path: directory.appendingPathComponent("archive.sqlite").path)
        let archive = MessageArchive(store: store, settings: .init(retention: nil), logger: logger)
        let writer = Task { await archive.run() }
        var failure: (any Error)?
        do { try await body(archive) } catch { failure = error }
        // The writer commits what waits, then stops.
        writer.cancel()
        await writer.value
        if let failure { throw failure }
    }

    /// bob's chat for alice's inbox as the broker gives it: stored at `offset` of her stream.
    static func storedChat(to recipient: String, id: String, deliveryID: UInt64, offset: UInt64, epoch: UInt64) -> MosquittoMessage {
        var payload = ChatPayload(send: ChatSend(to: recipient, messageID: id, content: .text("hi")), from: "bob", serverTime: 1)
        payload.offset = offset
        payload.epoch = epoch
        return MosquittoMessage(topic: "im/u/\(recipient)/inbox", payload: PayloadCodec.encode(payload), qos: .atLeastOnce, deliveryID: deliveryID)
    }

    @Test("the device's own copy is done for it once stored, before the broker has the chat: a delivery just above it goes at once (under ack-through, waiting for that chat's PUBACK would wait on the session's own held writes)")
    func ownCopyDoneAtCommit() async throws {
        try await Self.withArchive { archive in
            let harness = try await Harness.start(archive: archive)
            let (_, session) = try await harness.login()
            // The broker is slow to acknowledge alice's chat.
            session.holdOutcomes()
            let sequence = try await harness.send(.chat(ChatSend(to: "bob", messageID: "m-1", content: .text("hi"))))
            let published = await session.next { if case .chats(let chats) = $0 { chats } else { nil } }
            #expect(published?.map(\.topic) == ["im/u/bob/inbox"])
            // Her own copy took offset 1 of her stream; bob's chat to her, stored next, offset 2.
            session.deliver(Self.storedChat(to: "alice", id: "b-1", deliveryID: 21, offset: 2, epoch: archive.epoch.rawValue))
            let (_, first) = try await harness.next(within: 5)
            guard case .delivery(let delivery) = first else { throw Failure("expected bob's chat, got \(first)") }
            #expect(delivery.messageID == "b-1" && delivery.streamOffset == 2)
            // Then the broker takes alice's chat: its ACK names her own copy's offset.
            session.releaseOutcomes()
            let (_, second) = try await harness.next()
            guard case .ack(let ack) = second else { throw Failure("expected the chat's ACK, got \(second)") }
            #expect(ack.sequence == sequence && ack.streamOffset == 1 && ack.error == nil)
            try await harness.channel.close()
        }
    }

    @Test("a delivery held above a gap of the stream is acknowledged to the broker at once (the archive has it): it holds none of the session's writes")
    func heldDeliveryAcknowledged() async throws {
        try await Self.withArchive { archive in
            let harness = try await Harness.start(archive: archive)
            let (_, session) = try await harness.login()
            // Offset 1 never came: 2 waits above the gap.
            session.deliver(Self.storedChat(to: "alice", id: "b-2", deliveryID: 32, offset: 2, epoch: archive.epoch.rawValue))
            let acknowledged = await session.next(within: 5) { if case .send(let ids, _) = $0, !ids.isEmpty { ids } else { nil } }
            #expect(acknowledged == [32])
            // 1 comes: both go, in order.
            session.deliver(Self.storedChat(to: "alice", id: "b-1", deliveryID: 31, offset: 1, epoch: archive.epoch.rawValue))
            var offsets: [UInt64] = []
            while offsets.count < 2 {
                if case .delivery(let delivery) = try await harness.next().1 { offsets.append(delivery.streamOffset ?? 0) }
            }
            #expect(offsets == [1, 2])
            try await harness.channel.close()
        }
    }
}
