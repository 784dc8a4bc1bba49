import Foundation
import IMGateway
import IMTestSupport
import IMWire
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// PROTOCOL.md 6.14: a device that logs in with its position and sends SYNC right after
/// LOGIN_OK (as the section recommends) gets every missed message exactly once, however the
/// login's catch-up, the SYNC's and the device's ACKs interleave (spec-review defect 1: all or
/// part of the catch-up came twice, more often on a busy machine).
@Suite("The catch-up of a LOGIN followed at once by SYNC comes once", .serialized, .stopsWhatItStarts)
struct CatchUpOnceTests {
    static let logins = 300
    static let missed = 10

    @Test("LOGIN with a position, SYNC at once, 300 times, a core kept busy: each missed message exactly once, before the SYNC's ACK")
    func loginThenSync() async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker)
        // bob's phone has a position; then alice sends what it misses.
        let (first, ok) = try await gateway.login("bob")
        let epoch = try #require(ok.position?.epoch)
        let position = try #require(ok.position?.offset)
        try await first.send(.logout(Logout()))
        try await first.closed()
        let alice = try await gateway.device("alice")
        for index in 1...Self.missed { #expect(try await alice.chat(to: "bob", id: "m-\(index)", text: "\(index)").error == nil) }
        let expected = Array((position + 1)...(position + UInt64(Self.missed)))

        let busy = BusyCore()
        defer { busy.stop() }
        let token = try await TokenMinter(secret: IMGWProcess.secret).mint(user: "bob")
        var wrong: [String] = []
        for attempt in 0..<Self.logins {
            let device = try await TestDevice.connect(port: gateway.port)
            let asked = StreamPosition(epoch: epoch, offset: position)
            try await device.send(.login(LoginRequest(token: token, deviceID: "phone", position: asked)))
            let (_, answer) = try await device.next(within: 30, "LOGIN_OK")
            guard case .loginOK = answer else { throw TestError("login \(attempt): \(answer)") }
            let sync = try await device.send(.sync(Sync(position: asked)))
            var offsets: [UInt64] = []
            while true {
                let (frame, message) = try await device.next(within: 30, "login \(attempt): the catch-up and the SYNC's ACK")
                if case .delivery(let delivery) = message {
                    offsets.append(delivery.streamOffset ?? 0)
                    try await device.ack(frame)
                } else if case .ack(let ack) = message, ack.sequence == sync {
                    break
                }
            }
            if offsets != expected { wrong.append("login \(attempt): \(offsets)") }
            try await device.send(.logout(Logout()))
            try await device.closed(within: 30)
        }
        #expect(wrong.isEmpty, "\(wrong.count) of \(Self.logins) catch-ups were not \(expected) once each: \(wrong.prefix(5))")
        await gateway.stop()
    }

    /// A thread that keeps one core busy until stopped: the gateway's tasks, reads and the
    /// device's ACKs interleave as on a loaded machine.
    final class BusyCore: Sendable {
        private let running = Atomic<Bool>(true)

        init() {
            Thread.detachNewThread { [self] in
                var x: UInt64 = 1
                while running.load(ordering: .relaxed) { x = x &* 6364136223846793005 &+ 1442695040888963407 }
                _ = x
            }
        }

        func stop() {
            running.store(false, ordering: .relaxed)
        }
    }
}
