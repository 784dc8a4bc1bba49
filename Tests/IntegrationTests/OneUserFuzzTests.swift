import Foundation
import IMGateway
import IMWire
import NIOCore
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
import IMTestSupport
#endif

/// Hundreds of connections of one user with overlapping device ids, random frames and random
/// aborts, against `imgw serve` with its defaults: every connection ends (none stays counted
/// open), and SIGTERM then ends imgw, and its broker, at once.
@Suite("One user, hundreds of connections, fuzzed", .serialized, .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct OneUserFuzzTests {
    /// A frame chosen at random: valid requests of every kind (some to the user's own
    /// devices), a LOGIN again, and frames with a garbled body.
    static func randomFrame(_ random: inout some RandomNumberGenerator, sequence: UInt32, token: String, devices: Int) -> IMFrame {
        let device = "d-\(Int.random(in: 0..<devices, using: &random))"
        if Int.random(in: 0..<50, using: &random) == 0 {
            // A DATA frame whose body is random bytes (fatal: ERROR and close).
            var body = ByteBuffer()
            for _ in 0..<Int.random(in: 0..<64, using: &random) { body.writeInteger(UInt8.random(in: 0...255, using: &random)) }
            return IMFrame(type: .data, sequence: sequence, timestamp: 1_700_000_000, sessionID: 0, body: body)
        }
        let message: IMMessage
        switch Int.random(in: 0..<11, using: &random) {
        case 0: message = .chat(ChatSend(to: "eve", messageID: "c-\(sequence)", content: .text("to myself")))
        case 1: message = .chat(ChatSend(to: "frank", messageID: "c-\(sequence)", content: .text("to frank")))
        case 2: message = .presenceWatch(PresenceWatch(users: ["eve", "frank"]))
        case 3: message = .presenceUnwatch(PresenceUnwatch(users: ["frank"]))
        case 4: message = .typing(Typing(to: "eve", state: .typing))
        case 5: message = .login(LoginRequest(token: token, deviceID: device))
        case 6: message = .heartbeat
        case 7: message = .locationShareStart(LocationShareStart(audience: ["eve"], duration: 60))
        case 8: message = .readReceipt(ReadReceipt(to: "eve", messageID: "c-1"))
        case 9: message = .logout(Logout())
        default: message = .locationUpdate(LocationUpdate(location: IMLocation(lat: 1, lon: 2, tst: 1_700_000_000)))
        }
        return message.frame(sequence: sequence, timestamp: 1_700_000_000, sessionID: 0)
    }

    @Test("531 connections of one user, 40 device ids, 100 fuzzed frames each and random aborts: none stays open; SIGTERM ends imgw and its broker within 5 s")
    func oneUser() async throws {
        let setup = try EmbeddedGateway.Setup.scratch("imgw-fuzz")
        TestResources.track { try? FileManager.default.removeItem(at: setup.directory) }
        let gateway = try await EmbeddedGateway.start(setup)
        let broker = try #require(setup.brokerPID())
        let minter = TokenMinter(secret: IMGWProcess.secret)
        let token = try await minter.mint(user: "eve")
        let connections = 531
        // All at once; each logs in, then writes its frames over a few seconds and leaves,
        // half of them by aborting in the middle.
        let outcomes = Tally()
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<connections {
                group.addTask {
                    var random = SystemRandomNumberGenerator()
                    guard let device = try? await TestDevice.connect(port: setup.tlvPort) else { return }
                    let login = LoginRequest(token: token, deviceID: "d-\(index % 40)")
                    try? await device.write(IMMessage.login(login).frame(sequence: 1, timestamp: 1_700_000_000, sessionID: 0))
                    let abortAfter = Int.random(in: 1...100, using: &random)
                    for frame in 0..<100 {
                        if frame == abortAfter, Bool.random(using: &random) { break }
                        let next = Self.randomFrame(&random, sequence: UInt32(frame + 2), token: token, devices: 40)
                        guard (try? await device.write(next)) != nil else { break }
                        try? await Task.sleep(for: .milliseconds(Int.random(in: 0...40, using: &random)))
                    }
                    await device.drop()
                    // What it was told, for the record.
                    while let (_, message) = try? await device.next(within: 0.01, "what it was told") {
                        let what: String
                        switch message {
                        case .loginOK: what = "LOGIN_OK"
                        case .kick(let kick): what = "KICK \(kick.reason)"
                        case .error(let error): what = "ERROR \(error.code)"
                        default: continue
                        }
                        outcomes.counts.withLock { $0[what, default: 0] += 1 }
                    }
                }
            }
        }
        print("one-user fuzz: \(outcomes.counts.withLock { $0 }.sorted { $0.key < $1.key })")
        // Every connection ends: the gateway counts each until its MQTT session has ended.
        let deadline = ContinuousClock.now + .seconds(60)
        var open = try await Self.openConnections(setup)
        while open > 0, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
            open = try await Self.openConnections(setup)
        }
        #expect(open == 0, "connections still counted open after every client closed")
        // A device still gets in and chats.
        let frank = try await TestDevice.connect(port: setup.tlvPort)
        try await frank.login(token: try await minter.mint(user: "frank"), device: "phone")
        #expect(try await frank.chat(to: "eve", id: "after-fuzz", text: "still here").error == nil)
        await frank.drop()

        let stopping = ContinuousClock.now
        gateway.process.signal(SIGTERM)
        // Not for ever: past 15 s it is killed (and the test has failed).
        let killer = Task {
            try await Task.sleep(for: .seconds(15))
            gateway.process.signal(SIGKILL)
        }
        _ = await gateway.process.waitForExit()
        killer.cancel()
        let took = ContinuousClock.now - stopping
        #expect(took < .seconds(5), "imgw took \(took) to end after SIGTERM")
        if open > 0 || took >= .seconds(5) {
            let log = setup.directory.deletingLastPathComponent().appendingPathComponent("imgw-fuzz-\(UInt32.random(in: 0...UInt32.max)).log")
            try gateway.allPrinted.joined(separator: "\n").write(to: log, atomically: true, encoding: .utf8)
            print("one-user fuzz: \(open) left open; imgw's log is in \(log.path)")
        }
        #expect(await EmbeddedBrokerTests.ended(broker, within: .seconds(5)), "its broker outlived it")
    }

    /// imgw_connections on the gateway's /metrics.
    static func openConnections(_ setup: EmbeddedGateway.Setup) async throws -> Int {
        Int(try await scrapeMetric("imgw_connections", port: setup.metricsPort))
    }
}

/// Counts by name, shared by tasks.
final class Tally: Sendable {
    let counts = Mutex<[String: Int]>([:])
}
