import Foundation
import IMGateway
import IMWire
import NIOCore
import Testing
import IMTestSupport

/// Positions in LOGIN and SYNC (docs/PROTOCOL.md 6.14): taken when they are good, answered
/// clearly when they are not, and never a bother to another device.
@Suite("Catching up: positions in LOGIN and SYNC", .stopsWhatItStarts, .timeLimit(.minutes(2)))
struct SyncTests {
    /// Sends LOGIN with `position`; returns LOGIN_OK.
    static func login(_ device: TestDevice, _ gateway: TestGateway, user: String, position: StreamPosition?) async throws -> LoginOK {
        try await device.send(.login(LoginRequest(token: try await gateway.minter.mint(user: user), deviceID: "phone", position: position)))
        let (_, message) = try await device.next(within: 10, "LOGIN_OK")
        guard case .loginOK(let ok) = message else { throw TestError("expected LOGIN_OK, got \(message)") }
        return ok
    }

    /// The next `count` deliveries' offsets.
    static func offsets(_ device: TestDevice, _ count: Int) async throws -> [UInt64] {
        var offsets: [UInt64] = []
        while offsets.count < count { offsets.append(try await device.nextDelivery(within: 10, "delivery \(offsets.count + 1)").streamOffset ?? 0) }
        return offsets
    }

    @Test("LOGIN's position: taken, past the end (refused), of another epoch, or unreadable; SYNC's likewise; another device chats on undisturbed")
    func positions() async throws {
        let gateway = try await TestGateway.start()
        // bob's phone has logged in once: the archive keeps its position (0).
        let first = try await gateway.device("bob", device: "phone")
        try await first.send(.logout(Logout()))
        try await first.closed()
        let alice = try await gateway.device("alice", device: "phone")
        for index in 1...5 { #expect(try await alice.chat(to: "bob", id: "m-\(index)", text: "\(index)").error == nil) }
        // carol and dave chat throughout.
        let carol = try await gateway.device("carol", device: "phone")
        let dave = try await gateway.device("dave", device: "phone")
        var talk = 0
        func talkOnce() async throws {
            talk += 1
            #expect(try await carol.chat(to: "dave", id: "t-\(talk)", text: "still here").error == nil)
            #expect(try await dave.nextDelivery().messageID == "t-\(talk)")
        }

        // A plain LOGIN learns the epoch, and gets the five.
        let plain = try await TestDevice.connect(port: gateway.port)
        let ok = try await Self.login(plain, gateway, user: "bob", position: nil)
        let epoch = try #require(ok.position?.epoch)
        #expect(ok.syncStatus == .continued && ok.position?.offset == 0)
        #expect(try await Self.offsets(plain, 5) == [1, 2, 3, 4, 5])
        await plain.drop()
        try await talkOnce()

        // Its own position, of this epoch: taken, even an earlier one (the device lost data).
        let earlier = try await TestDevice.connect(port: gateway.port)
        let taken = try await Self.login(earlier, gateway, user: "bob", position: StreamPosition(epoch: epoch, offset: 3))
        #expect(taken.syncStatus == .continued && taken.position == StreamPosition(epoch: epoch, offset: 3))
        #expect(try await Self.offsets(earlier, 2) == [4, 5])
        await earlier.drop()

        // Past the end: refused, the gateway's own position (5, as ACKed) is used instead.
        let future = try await TestDevice.connect(port: gateway.port)
        let refused = try await Self.login(future, gateway, user: "bob", position: StreamPosition(epoch: epoch, offset: 999))
        #expect(refused.syncStatus == .refused && refused.position == StreamPosition(epoch: epoch, offset: 5))
        try await talkOnce()
        // Another epoch: the gateway's own position.
        let other = try await TestDevice.connect(port: gateway.port)
        let changed = try await Self.login(other, gateway, user: "bob", position: StreamPosition(epoch: epoch &+ 1, offset: 2))
        #expect(changed.syncStatus == .epochChanged && changed.position == StreamPosition(epoch: epoch, offset: 5))
        await future.drop()

        // SYNC: past the end, another epoch, unreadable, and a good one.
        #expect(try await alice.chat(to: "bob", id: "m-6", text: "6").error == nil)
        #expect(try await other.nextDelivery().streamOffset == 6)
        let syncFuture = try await other.send(.sync(Sync(position: StreamPosition(epoch: epoch, offset: 999))))
        let ackFuture = try await other.nextAck(of: syncFuture)
        #expect(ackFuture.error == nil && ackFuture.syncStatus == .refused && ackFuture.streamOffset == 6 && ackFuture.streamEpoch == epoch)
        let syncEpoch = try await other.send(.sync(Sync(position: StreamPosition(epoch: 42, offset: 1))))
        #expect(try await other.nextAck(of: syncEpoch).syncStatus == .epochChanged)
        var malformed = TLVWriter()
        malformed.write(.operation, integer: IMOperation.sync.rawValue)
        malformed.write(.streamOffset, integer: UInt64(3))
        try await other.write(IMFrame(type: .control, sequence: 77, timestamp: 0, sessionID: 1, body: malformed.buffer))
        let badAck = try await other.nextAck(of: 77)
        #expect(badAck.error == .badRequest, "\(badAck)")
        // From 4: 5 again, marked ARCHIVED, then the ACK; not 6, which this connection gave
        // (PROTOCOL.md 6.14: "that this connection has not given me").
        let again = try await other.send(.sync(Sync(position: StreamPosition(epoch: epoch, offset: 4))))
        var replayed: [UInt64] = []
        while true {
            let (frame, message) = try await other.next(within: 10, "the SYNC's deliveries and ACK")
            if case .delivery(let delivery) = message {
                #expect(delivery.archived)
                replayed.append(delivery.streamOffset ?? 0)
                try await other.ack(frame)
            } else if case .ack(let ack) = message, ack.sequence == again {
                #expect(ack.syncStatus == .continued && ack.streamOffset == 6)
                break
            }
        }
        #expect(replayed == [5], "the ACK comes after the deliveries it caused, and this connection's own are not given again")
        try await talkOnce()

        // A LOGIN whose position cannot be read is a malformed LOGIN: ERROR BAD_REQUEST, closed.
        let broken = try await TestDevice.connect(port: gateway.port)
        var login = TLVWriter()
        login.write(.operation, integer: IMOperation.login.rawValue)
        login.write(.authToken, string: try await gateway.minter.mint(user: "bob"))
        login.write(.streamOffset, integer: UInt64(3))
        try await broken.write(IMFrame(type: .control, sequence: 1, timestamp: 0, sessionID: 1, body: login.buffer))
        let error = try await broken.nextError()
        #expect(error.code == .badRequest, "\(error)")
        try await broken.closed()
        try await talkOnce()
        await gateway.stop()
    }

    @Test("SYNC on a gateway without an archive: UNKNOWN_OPERATION, the connection stays")
    func noArchive() async throws {
        let gateway = try await TestGateway.start { $0.archive.store = .none }
        let bob = try await gateway.device("bob", device: "phone")
        let sync = try await bob.send(.sync(Sync()))
        let ack = try await bob.nextAck(of: sync)
        #expect(ack.error == .unknownOperation && ack.errorMessage == "this gateway keeps no message archive")
        let alice = try await gateway.device("alice", device: "phone")
        let sent = try await alice.chat(to: "bob", id: "m-1", text: "hi")
        #expect(sent.error == nil && sent.streamOffset == nil, "no offset without an archive")
        let delivery = try await bob.nextDelivery()
        #expect(delivery.messageID == "m-1" && delivery.streamOffset == nil)
        await gateway.stop()
    }
}
