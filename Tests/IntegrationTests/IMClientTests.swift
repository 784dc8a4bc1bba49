import Foundation
import IMClient
import IMGateway
import IMWire
import Mosquitto
import Testing

/// IMClient and imcli against imgw's server in-process, on a real mosquitto.
@Suite("IMClient: chat through a gateway", .timeLimit(.minutes(3)))
struct IMClientIntegrationTests {
    @Test("alice and bob chat both ways; a read receipt reaches alice")
    func chat() async throws {
        let gateway = try await TestGateway.start()
        let alice = try await gateway.client("alice", device: "phone")
        let bob = try await gateway.client("bob", device: "phone")
        #expect(bob.session.userID == "bob")
        #expect(bob.session.deviceID == "phone")
        let aliceEvents = Collector(alice.events)
        let bobEvents = Collector(bob.events)

        let sent = try await alice.send(to: "bob", text: "hi bob", messageID: "c-1")
        #expect(sent.messageID == "c-1")
        let received = try await nextMessage(bobEvents)
        #expect(received.from == "alice")
        #expect(received.messageID == "c-1")
        #expect(received.text == "hi bob")
        #expect(received.serverTime == sent.serverTime, "both sides see the gateway's time")
        #expect(!received.resend)

        try await bob.send(to: "alice", text: "hi alice")
        let reply = try await nextMessage(aliceEvents)
        #expect(reply.from == "bob")
        #expect(reply.text == "hi alice")

        try await bob.sendReadReceipt(to: "alice", messageID: "c-1")
        var receipt: IMClient.Receipt?
        while receipt == nil {
            if case .receipt(let seen) = try await aliceEvents.next(within: 10, "the read receipt") { receipt = seen }
        }
        #expect(receipt?.from == "bob")
        #expect(receipt?.messageID == "c-1")
        #expect(receipt?.kind == .read)

        await alice.logout()
        await bob.close()
        #expect(await aliceEvents.pending.contains(.disconnected) == false, "logout is not a disconnection")
        await gateway.stop()
    }

    @Test("a delivery that arrives twice is surfaced once and ACKed both times")
    func duplicateDelivery() async throws {
        let gateway = try await TestGateway.start()
        let alice = try await gateway.client("alice", device: "phone")
        let bob = try await gateway.client("bob", device: "phone")
        let bobEvents = Collector(bob.events)
        let sent = try await alice.send(to: "bob", text: "once", messageID: "dup-1")

        // The same message id again on bob's inbox, as it arrives when alice resends through a
        // gateway that did not see the first copy (or the broker redelivers).
        let mqtt = makeClient(gateway.broker)
        try await mqtt.connect()
        let copy = ChatPayload(id: "dup-1", from: "alice", to: "bob", ts: sent.serverTime ?? 0, type: "text", text: "once")
        try await mqtt.publish(topic: "im/u/bob/inbox", payload: PayloadCodec.encode(copy), qos: .atLeastOnce)
        await mqtt.close()
        try await alice.send(to: "bob", text: "after", messageID: "dup-2")

        #expect(try await nextMessage(bobEvents).messageID == "dup-1")
        #expect(try await nextMessage(bobEvents).messageID == "dup-2", "the copy of dup-1 is not surfaced")
        // The copy was ACKed too: otherwise the gateway would hold bob's own messages.
        try await bob.send(to: "alice", text: "still flowing")
        await gateway.stop()
    }

    @Test("a message to an invalid user id is refused; the connection stays usable")
    func refused() async throws {
        let gateway = try await TestGateway.start()
        let alice = try await gateway.client("alice", device: "phone")
        await #expect { try await alice.send(to: "bob/x", text: "nope") } throws: { error in
            guard case IMClientError.refused(let code, _) = error else { return false }
            return code == .invalidUserID
        }
        try await alice.send(to: "bob", text: "fine")
        await gateway.stop()
    }

    @Test("a bad or expired token: loginRefused with the gateway's code")
    func badToken() async throws {
        let gateway = try await TestGateway.start()
        let forged = try await TokenMinter(secret: "not-the-gateway-secret").mint(user: "mallory")
        await #expect { _ = try await IMClient.connect(.init(port: gateway.port, token: forged)) } throws: { error in
            guard case IMClientError.loginRefused(let code, _) = error else { return false }
            return code == .authFailed
        }
        let expired = try await gateway.minter.mint(user: "dave", validFor: -3600)
        await #expect { _ = try await IMClient.connect(.init(port: gateway.port, token: expired)) } throws: { error in
            guard case IMClientError.loginRefused(let code, _) = error else { return false }
            return code == .tokenExpired
        }
        await gateway.stop()
    }

    @Test("presence: watching a user shows their device online, then offline when it logs out")
    func presence() async throws {
        let gateway = try await TestGateway.start()
        let carol = try await gateway.client("carol", device: "laptop")
        let watcher = try await gateway.client("dave", device: "phone")
        let events = Collector(watcher.events)
        try await watcher.watchPresence(["carol"])
        #expect(try await nextPresence(events) == IMClient.Presence(user: "carol", device: "laptop", status: .online))
        await carol.logout()
        let offline = try await nextPresence(events)
        #expect(offline.status == .offline)
        #expect(offline.lastSeen != nil)
        await gateway.stop()
    }

    @Test("the same device logging in again: the first client is kicked, then disconnected")
    func takeover() async throws {
        let gateway = try await TestGateway.start()
        let first = try await gateway.client("erin", device: "phone")
        let events = Collector(first.events)
        _ = try await gateway.client("erin", device: "phone")
        #expect(try await events.next(within: 10, "the kick") == .kicked(.sessionTakenOver, "logged in elsewhere"))
        #expect(try await events.next(within: 10, "the end") == .disconnected)
        await #expect(throws: IMClientError.disconnected) { try await first.send(to: "bob", text: "x") }
        await gateway.stop()
    }

    // MARK: imcli

    @Test("imcli: listen prints what send sends; send exits 0 once ACKed; Ctrl-C logs listen out, exit 0")
    func cliSendAndListen() async throws {
        let gateway = try await TestGateway.start()
        let port = "\(gateway.port)"
        let listen = try ChildProcess(
            executable: Self.imcli, arguments: ["listen", "--token", try await gateway.minter.mint(user: "bob"), "--port", port])
        let lines = Collector(listen.lines)
        var line = ""
        while !line.contains("listening as bob/cli") { line = try await lines.next(within: 20, "imcli listen's ready line (last: \(line))") }

        let send = try await Self.runCLI([
            "send", "--token", try await gateway.minter.mint(user: "alice"), "--port", port, "--to", "bob", "hello", "from", "imcli",
        ])
        #expect(send.status == 0, "\(send.output)")
        #expect(send.output.hasPrefix("sent "), "\(send.output)")
        #expect(send.output.contains(" to bob (server time "), "\(send.output)")

        while line != "alice: hello from imcli" { line = try await lines.next(within: 10, "the message line in imcli listen's output") }
        listen.signal(SIGINT)
        #expect(Self.exitCode(await listen.waitForExit()) == 0, "SIGINT: logged out, exit 0")
        await gateway.stop()
    }

    @Test("imcli exit codes: refused 2, cannot connect 3, usage 1; imcli token mints what the gateway accepts")
    func cliExitCodes() async throws {
        let gateway = try await TestGateway.start()
        let port = "\(gateway.port)"
        let token = try await gateway.minter.mint(user: "alice")

        let refused = try await Self.runCLI(["send", "--token", token, "--port", port, "--to", "bob/x", "hi"])
        #expect(refused.status == 2, "\(refused.output)")
        #expect(refused.output.contains("INVALID_USER_ID"), "\(refused.output)")

        let unreachable = try await Self.runCLI(["send", "--token", token, "--port", "\(freePort())", "--to", "bob", "hi"])
        #expect(unreachable.status == 3, "\(unreachable.output)")
        #expect(unreachable.output.contains("cannot connect to 127.0.0.1:"), "\(unreachable.output)")
        #expect(unreachable.output.contains("is imgw running?"), "\(unreachable.output)")

        let usage = try await Self.runCLI(["send", "--to", "bob", "hi"])
        #expect(usage.status == 1, "\(usage.output)")

        let config = FileManager.default.temporaryDirectory.appendingPathComponent("imcli-\(UUID().uuidString).yaml")
        try "auth:\n  jwt_secret: \(TestGateway.secret)\n".write(to: config, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: config) }
        let minted = try await Self.runCLI(["token", "frank", "--config", config.path])
        #expect(minted.status == 0, "\(minted.output)")
        let client = try await IMClient.connect(.init(port: gateway.port, token: minted.output.trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(client.session.userID == "frank")
        await client.close()

        let sent = try await Self.runCLI(["send", "--as", "frank", "--config", config.path, "--port", port, "--to", "bob", "--json", "hi"])
        #expect(sent.status == 0, "\(sent.output)")
        #expect(sent.output.hasPrefix(#"{"type":"sent","id":""#), "\(sent.output)")
        await gateway.stop()
    }

    /// The imcli executable built next to this test bundle.
    static var imcli: String {
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        return bundle.deletingLastPathComponent().appendingPathComponent("imcli").path
    }

    /// Runs imcli to its exit: exit code and output (stdout and stderr).
    static func runCLI(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        let process = try ChildProcess(executable: imcli, arguments: arguments)
        var output = ""
        for await line in process.lines { output += line + "\n" }
        return (exitCode(await process.waitForExit()), output)
    }

    /// The exit code in a wait status, or 128 + the signal that ended the process.
    static func exitCode(_ status: Int32) -> Int32 {
        status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + status & 0x7F
    }
}

extension TestGateway {
    /// An IMClient logged in as `user` on `device`.
    func client(_ user: String, device: String) async throws -> IMClient {
        try await IMClient.connect(.init(port: port, token: try await minter.mint(user: user), deviceID: device))
    }
}

/// The next chat message among a client's events (other events skipped).
private func nextMessage(_ events: Collector<IMClient.Event>) async throws -> IMClient.Message {
    while true {
        if case .message(let message) = try await events.next(within: 10, "a message") { return message }
    }
}

/// The next presence change among a client's events (other events skipped).
private func nextPresence(_ events: Collector<IMClient.Event>) async throws -> IMClient.Presence {
    while true {
        if case .presence(let presence) = try await events.next(within: 10, "a presence change") { return presence }
    }
}
