@testable import IMClient
import IMWire
import NIOCore
import Testing

@Suite("StreamCursor")
struct StreamCursorTests {
    @Test("offsets move the position when they close the gap below; each is new once")
    func received() {
        var cursor = StreamCursor(position: StreamPosition(epoch: 9, offset: 10))
        let at = cursor.received(10), above = cursor.received(12)
        #expect(!at, "at or below the position: had it")
        #expect(above)
        #expect(cursor.offset == 10)
        let twice = cursor.received(12), gap = cursor.received(11)
        #expect(!twice, "a second time")
        #expect(gap)
        #expect(cursor.offset == 12)
        #expect(cursor.position == StreamPosition(epoch: 9, offset: 12))
    }

    @Test("LOGIN_OK: a position taken moves the cursor on; one not taken starts it again there")
    func loggedIn() {
        var cursor = StreamCursor()
        #expect(cursor.position == nil, "no epoch before a gateway said one")
        cursor.loggedIn(epoch: 9, offset: 40, status: .new)
        #expect(cursor.position == StreamPosition(epoch: 9, offset: 40))
        _ = cursor.received(45)
        cursor.loggedIn(epoch: 9, offset: 42, status: .continued)
        #expect(cursor.offset == 42)
        cursor.loggedIn(epoch: 9, offset: 30, status: .continued)
        #expect(cursor.offset == 42, "an earlier position the gateway took does not move it back")
        let known = cursor.received(45)
        #expect(!known, "what came above is still known")
        cursor.loggedIn(epoch: 11, offset: 5, status: .epochChanged)
        #expect(cursor.position == StreamPosition(epoch: 11, offset: 5))
        let forgotten = cursor.received(45)
        #expect(forgotten, "offsets of the old epoch are forgotten")
        cursor.loggedIn(epoch: 11, offset: 99, status: .unavailable)
        #expect(cursor.offset == 5, "no decision: unchanged")
        cursor.loggedIn(epoch: 11, offset: 7, status: .refused)
        #expect(cursor.offset == 7)
    }

    @Test("a SYNC's ACK moves the position to its end: what was not delivered is not for this device")
    func caughtUp() {
        var cursor = StreamCursor(position: StreamPosition(epoch: 9, offset: 0))
        _ = cursor.received(2)
        _ = cursor.received(5)
        cursor.caughtUp(through: 3, epoch: 9)
        #expect(cursor.offset == 3)
        let still = cursor.received(5)
        #expect(!still, "above the end, still known")
        _ = cursor.received(4)
        #expect(cursor.offset == 5)
    }
}

@Suite("InboundRouter with an archive")
struct InboundRouterArchiveTests {
    static func delivery(_ id: String, offset: UInt64?, archived: Bool = false, sequence: UInt32) -> IMFrame {
        IMMessage.delivery(ChatDelivery(
            from: "alice", messageID: id, serverTime: 1, content: .text("hi"), streamOffset: offset, archived: archived))
            .frame(sequence: sequence, timestamp: 0, sessionID: 1)
    }

    @Test("a delivery whose offset came before is ACKed and not surfaced, whatever its id; LOGIN_OK sets the cursor")
    func offsetDedup() {
        var router = InboundRouter()
        let ok = IMMessage.loginOK(LoginOK(userID: "bob", position: StreamPosition(epoch: 9, offset: 3), syncStatus: .continued))
            .frame(sequence: 1, timestamp: 0, sessionID: 1)
        let loggedIn = router.react(to: ok, timestamp: 0)
        #expect(loggedIn.count == 1)
        #expect(router.cursor.position == StreamPosition(epoch: 9, offset: 3))
        let first = router.react(to: Self.delivery("m-4", offset: 4, archived: true, sequence: 2), timestamp: 0)
        guard case .emit(.message(let message)) = first.first else {
            Issue.record("not surfaced: \(first)")
            return
        }
        #expect(message.isArchived && message.streamOffset == 4)
        #expect(router.replayed == 1)
        // The broker's copy of the same message: ACK only.
        let again = router.react(to: Self.delivery("m-4", offset: 4, sequence: 3), timestamp: 0)
        #expect(again.count == 1)
        guard case .reply = again.first else {
            Issue.record("expected an ACK only: \(again)")
            return
        }
        // Below the position LOGIN_OK gave: had it.
        let below = router.react(to: Self.delivery("m-2", offset: 2, sequence: 4), timestamp: 0)
        #expect(below.count == 1)
    }
}
