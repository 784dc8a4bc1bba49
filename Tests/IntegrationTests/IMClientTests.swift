import ChildProcesses
import Foundation
import IMClient
import IMGateway
import IMWire
import Mosquitto
import Testing
import IMTestSupport

/// IMClient and imcli against imgw's server in-process, on a real mosquitto.
@Suite("IMClient: chat through a gateway", .stopsWhatItStarts, .timeLimit(.minutes(3)))
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
            // (The "delivered" receipt of c-1 may come first: notices are queued behind chat.)
            if case .receipt(let seen) = try await aliceEvents.next(within: 10, "the read receipt"), seen.kind == .read { receipt = seen }
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
        // Written as a gateway writes it: with the tag of the gateways' shared secret.
        let bytes = PayloadCodec.encode(copy)
        let tag = MessageAuthenticator(secret: TestGateway.secret).tag(topic: "im/u/bob/inbox", payload: bytes)
        try await mqtt.publish(
            topic: "im/u/bob/inbox", payload: bytes, qos: .atLeastOnce,
            properties: MQTTProperties(correlationData: tag))
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
        // (After the catch-up's end, reported once at login.)
        var event = try await events.next(within: 10, "the kick")
        if case .synced = event { event = try await events.next(within: 10, "the kick") }
        #expect(event == .kicked(.sessionTakenOver, "logged in elsewhere"))
        #expect(try await events.next(within: 10, "the end") == .disconnected)
        await #expect(throws: IMClientError.disconnected) { try await first.send(to: "bob", text: "x") }
        await gateway.stop()
    }

    // MARK: imcli

    @Test("imcli: listen prints what send sends; send exits 0 once ACKed; Ctrl-C logs listen out, exit 0")
    func cliSendAndListen() async throws {
        let gateway = try await TestGateway.start()
        let port = "\(gateway.port)"
        let listen = try spawn(
            Self.imcli, ["listen", "--token", try await gateway.minter.mint(user: "bob"), "--port", port])
        defer { Self.kill(listen) }
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
        let client = try await tracked(IMClient.connect(.init(port: gateway.port, token: minted.output.trimmingCharacters(in: .whitespacesAndNewlines))))
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
        let (status, output) = try await runCapturing(imcli, arguments)
        return (exitCode(status), output.isEmpty ? "" : output + "\n")
    }

    /// The exit code in a wait status, or 128 + the signal that ended the process.
    static func exitCode(_ status: Int32) -> Int32 {
        status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + status & 0x7F
    }

    @Test("imcli sub prints what imcli pub publishes (human and --json lines); short topics go to im/t/")
    func cliPubSub() async throws {
        let gateway = try await TestGateway.start()
        let port = "\(gateway.port)"
        let human = try Self.startCLI(["sub", "--token", try await gateway.minter.mint(user: "bob"), "--port", port, "news"])
        defer { Self.kill(human.process) }
        let json = try Self.startCLI([
            "sub", "--token", try await gateway.minter.mint(user: "carol"), "--port", port, "--json", "news", "im/t/rooms/#", "im/u/bob/inbox",
        ])
        defer { Self.kill(json.process) }
        #expect(try await Self.line(in: human.lines, "bob's filter result") { $0.hasPrefix("imcli: subscribed") } == "imcli: subscribed to im/t/news (QoS 1)")
        _ = try await Self.line(in: human.lines, "bob's ready line") { $0.contains("receiving publications as bob/cli-sub") }
        var results: [String] = []
        while true {
            let line = try await Self.line(in: json.lines, "carol's filter results") { $0.hasPrefix("{") || $0.contains("receiving publications") }
            if line.contains("receiving publications as carol/cli-sub") { break }
            results.append(line)
        }
        #expect(results == [
            #"{"type":"subscribed","filter":"im/t/news","qos":1}"#,
            #"{"type":"subscribed","filter":"im/t/rooms/#","qos":1}"#,
            #"{"type":"refused","filter":"im/u/bob/inbox","code":303,"name":"INVALID_TOPIC"}"#,
        ])

        let news = try await Self.runCLI(["pub", "--token", try await gateway.minter.mint(user: "alice"), "--port", port, "news", "hello", "world"])
        #expect(news.status == 0, "\(news.output)")
        #expect(news.output == "published 11 bytes on im/t/news (QoS 1)\n")
        #expect(try await Self.line(in: human.lines, "the publication in bob's output") { !$0.hasPrefix("imcli:") } == "im/t/news hello world")
        let line = try await Self.line(in: json.lines, "the publication in carol's output") { $0.hasPrefix("{") }
        #expect(line.hasPrefix(#"{"type":"publication","topic":"im/t/news","text":"hello world","qos":1,"retain":false,"server_time":"#), "\(line)")

        let room = try await Self.runCLI([
            "pub", "--token", try await gateway.minter.mint(user: "alice"), "--port", port, "--json", "--qos", "2", "im/t/rooms/1", "in full",
        ])
        #expect(room.status == 0, "\(room.output)")
        #expect(room.output == #"{"type":"published","topic":"im/t/rooms/1","bytes":7,"qos":2,"retain":false}"# + "\n")
        let roomLine = try await Self.line(in: json.lines, "the room publication in carol's output") { $0.hasPrefix("{") }
        #expect(roomLine.hasPrefix(#"{"type":"publication","topic":"im/t/rooms/1","text":"in full","qos":1,"#), "\(roomLine)")

        human.process.signal(SIGINT)
        json.process.signal(SIGINT)
        #expect(Self.exitCode(await human.process.waitForExit()) == 0)
        #expect(Self.exitCode(await json.process.waitForExit()) == 0)
        await gateway.stop()
    }

    @Test("imcli pub refused (outside im/t/, a wildcard, above pubsub.max_qos) exits 2 with the code; sub with every filter refused exits 2")
    func cliPubRefused() async throws {
        let gateway = try await TestGateway.start { $0.pubsub.maxQoS = 1 }
        let port = "\(gateway.port)"
        let token = try await gateway.minter.mint(user: "alice")

        let accepted = try await Self.runCLI(["pub", "--token", token, "--port", port, "news", "fine"])
        #expect(accepted.status == 0, "\(accepted.output)")

        let outside = try await Self.runCLI(["pub", "--token", token, "--port", port, "im/u/bob/inbox", "sneaky"])
        #expect(outside.status == 2, "\(outside.output)")
        #expect(outside.output.contains("imcli: error: im/u/bob/inbox refused: INVALID_TOPIC (303)"), "\(outside.output)")
        #expect(outside.output.contains("topics must be inside im/t/"), "\(outside.output)")

        let wildcard = try await Self.runCLI(["pub", "--token", token, "--port", port, "--json", "news/#", "x"])
        #expect(wildcard.status == 2, "\(wildcard.output)")
        #expect(wildcard.output.hasPrefix(#"{"type":"failed","reason":"refused","message":"im/t/news/# refused: INVALID_TOPIC (303)"#), "\(wildcard.output)")
        #expect(wildcard.output.contains(#""code":303,"name":"INVALID_TOPIC"}"#), "\(wildcard.output)")

        let qos = try await Self.runCLI(["pub", "--token", token, "--port", port, "--qos", "2", "news", "x"])
        #expect(qos.status == 2, "\(qos.output)")
        #expect(qos.output.contains("QOS_NOT_SUPPORTED"), "\(qos.output)")

        let sub = try await Self.runCLI(["sub", "--token", token, "--port", port, "im/u/bob/#"])
        #expect(sub.status == 2, "\(sub.output)")
        #expect(sub.output.contains("im/u/bob/# refused: INVALID_TOPIC (303)"), "\(sub.output)")
        #expect(sub.output.contains("the gateway refused every filter"), "\(sub.output)")

        let usage = try await Self.runCLI(["pub", "--token", token, "--port", port, "--qos", "3", "news", "x"])
        #expect(usage.status == 1, "\(usage.output)")
        await gateway.stop()
    }

    @Test("imcli location share: the audience's imcli location watch prints the position (human, --json), mosquitto_sub sees it; others are refused")
    func cliLocation() async throws {
        let gateway = try await TestGateway.start()
        let port = "\(gateway.port)"
        let mqtt = try await MQTTWatcher.start(gateway.broker, topic: "im/u/alice/#")
        defer { mqtt.stop() }
        let alice = try await gateway.minter.mint(user: "alice")
        let share = try Self.startCLI(["location", "share", "--token", alice, "--port", port, "--with", "bob,carol", "--for", "120", "--lat", "52.52", "--lon", "13.405"])
        defer { Self.kill(share.process) }
        _ = try await Self.line(in: share.lines, "the share's status line") {
            $0 == "imcli: alice/cli-location shares its position 52.52,13.405 with bob, carol for 120 s (Ctrl-C to stop)"
        }
        let retained = try await Self.line(in: mqtt.lines, "the position on MQTT") { $0.hasPrefix("im/u/alice/location ") }
        #expect(retained.contains(#""lat":52.52"#) && retained.contains(#""lon":13.405"#), "\(retained)")

        let bob = try Self.startCLI(["location", "watch", "--token", try await gateway.minter.mint(user: "bob"), "--port", port, "alice"])
        defer { Self.kill(bob.process) }
        let carol = try Self.startCLI(["location", "watch", "--token", try await gateway.minter.mint(user: "carol"), "--port", port, "--json", "alice"])
        defer { Self.kill(carol.process) }
        #expect(try await Self.line(in: bob.lines, "bob's first position") { !$0.hasPrefix("imcli:") } == "[location] alice/cli-location 52.52,13.405")
        #expect(try await Self.line(in: carol.lines, "carol's watch") { $0.hasPrefix("{") } == #"{"type":"watching","user":"alice"}"#)
        let fix = try await Self.line(in: carol.lines, "carol's first position") { $0.hasPrefix("{") }
        #expect(fix.hasPrefix(#"{"type":"location","user":"alice","device":"cli-location","lat":52.52,"lon":13.405,"tst":"#), "\(fix)")

        let dave = try await Self.runCLI(["location", "watch", "--token", try await gateway.minter.mint(user: "dave"), "--port", port, "alice"])
        #expect(dave.status == 2, "\(dave.output)")
        #expect(dave.output.contains("alice refused: FORBIDDEN (203)"), "\(dave.output)")

        // --stdin: a bad line is reported and skipped; the share ends with the input.
        let piped = try await Self.runShell(
            "printf 'somewhere\\n48.85,2.35\\n' | exec '\(Self.imcli)' location share --token \(alice) --port \(port) --with bob,carol --device cli-stdin --stdin")
        #expect(piped.status == 0, "\(piped.output)")
        #expect(piped.output.contains(#"imcli: stdin line 1: expected "LAT LON" or "LAT,LON" in degrees, got "somewhere"; skipped"#), "\(piped.output)")
        #expect(piped.output.hasSuffix("imcli: stopped sharing\n"), "\(piped.output)")
        #expect(try await Self.line(in: bob.lines, "the piped position") { !$0.hasPrefix("imcli:") } == "[location] alice/cli-stdin 48.85,2.35")

        share.process.signal(SIGINT)
        #expect(Self.exitCode(await share.process.waitForExit()) == 0, "SIGINT: stopped sharing, logged out, exit 0")
        _ = try await Self.line(in: share.lines, "the share's last line") { $0 == "imcli: stopped sharing" }

        // --for: the share ends by itself, and with it the right to watch.
        let timed = try await Self.runCLI(["location", "share", "--token", alice, "--port", port, "--with", "bob", "--for", "1", "--lat", "-33.9", "--lon", "151.2"])
        #expect(timed.status == 0, "\(timed.output)")
        #expect(try await Self.line(in: bob.lines, "the timed share's position") { !$0.hasPrefix("imcli:") } == "[location] alice/cli-location -33.9,151.2")
        let late = try await Self.runCLI(["location", "watch", "--token", try await gateway.minter.mint(user: "bob"), "--port", port, "--device", "late", "alice"])
        #expect(late.status == 2, "the share is over: \(late.output)")

        bob.process.signal(SIGINT)
        carol.process.signal(SIGINT)
        #expect(Self.exitCode(await bob.process.waitForExit()) == 0)
        #expect(Self.exitCode(await carol.process.waitForExit()) == 0)
        await gateway.stop()
    }

    @Test("imcli --tls --ca: send and listen through the gateway's TLS listener; without --tls or with the wrong CA, exit 3 with a hint")
    func cliTLS() async throws {
        let pki = try await TLSTests.PKI.make()
        defer { try? FileManager.default.removeItem(at: pki.directory) }
        let gateway = try await TestGateway.start {
            $0.listen.tls = .init(certFile: pki.path("server.crt"), keyFile: pki.path("server.key"))
        }
        let port = "\(gateway.port)"
        let tls = ["--tls", "--ca", pki.path("ca.crt")]
        let listen = try Self.startCLI(["listen", "--token", try await gateway.minter.mint(user: "bob"), "--port", port] + tls)
        defer { Self.kill(listen.process) }
        _ = try await Self.line(in: listen.lines, "listen's ready line over TLS") { $0.contains("listening as bob/cli on 127.0.0.1:\(port) (TLS)") }

        let alice = try await gateway.minter.mint(user: "alice")
        let sent = try await Self.runCLI(["send", "--token", alice, "--port", port, "--to", "bob", "over", "tls"] + tls)
        #expect(sent.status == 0, "\(sent.output)")
        #expect(sent.output.hasPrefix("sent "), "\(sent.output)")
        #expect(try await Self.line(in: listen.lines, "the message over TLS") { !$0.hasPrefix("imcli:") } == "alice: over tls")

        let named = try await Self.runCLI(["send", "--token", alice, "--port", port, "--to", "bob", "--server-name", "localhost", "by", "name"] + tls)
        #expect(named.status == 0, "\(named.output)")

        // A configuration whose listener is TLS: without --tls, the warning says what to add.
        let config = pki.directory.appendingPathComponent("imgw.yaml")
        try """
            listen:
              tls:
                cert_file: \(pki.path("server.crt"))
                key_file: \(pki.path("server.key"))
            auth:
              jwt_secret: \(TestGateway.secret)

            """.write(to: config, atomically: true, encoding: .utf8)
        let plain = try await Self.runCLI(["send", "--as", "alice", "--config", config.path, "--port", port, "--to", "bob", "hi"])
        #expect(plain.status == 3, "\(plain.output)")
        #expect(plain.output.contains("listener is TLS-only (listen.tls): add --tls"), "\(plain.output)")
        #expect(plain.output.contains("(if its listener uses TLS (listen.tls), add --tls)"), "\(plain.output)")

        let untrusted = try await Self.runCLI(["send", "--token", alice, "--port", port, "--to", "bob", "--tls", "--ca", pki.path("other-ca.crt"), "hi"])
        #expect(untrusted.status == 3, "\(untrusted.output)")
        #expect(untrusted.output.contains("is its certificate trusted (--ca FILE)"), "\(untrusted.output)")

        let missing = try await Self.runCLI(["send", "--token", alice, "--port", port, "--to", "bob", "--tls", "--ca", "/nonexistent/ca.pem", "hi"])
        #expect(missing.status == 1, "\(missing.output)")
        #expect(missing.output.contains("--ca /nonexistent/ca.pem: no such file"), "\(missing.output)")

        listen.process.signal(SIGINT)
        #expect(Self.exitCode(await listen.process.waitForExit()) == 0)
        await gateway.stop()
    }

    /// A running imcli and its output lines (stdout and stderr).
    static func startCLI(_ arguments: [String]) throws -> (process: ChildProcess, lines: Collector<String>) {
        let process = try spawn(imcli, arguments)
        return (process, Collector(process.lines))
    }

    /// Runs a shell command line to its exit (for imcli reading a pipe): exit code and output.
    static func runShell(_ command: String) async throws -> (status: Int32, output: String) {
        let process = try spawn("/bin/sh", ["-c", command])
        var output = ""
        for await line in process.lines { output += line + "\n" }
        return (exitCode(await process.waitForExit()), output)
    }

    /// The next line of a running imcli that `matches` (others skipped); fails the test after
    /// `seconds` without a line.
    static func line(
        in lines: Collector<String>, within seconds: Double = 15, _ what: String, where matches: (String) -> Bool
    ) async throws -> String {
        var skipped: [String] = []
        while true {
            let line = try await lines.next(within: seconds, "\(what) (after \(skipped))")
            if matches(line) { return line }
            skipped.append(line)
        }
    }

    /// Kills an imcli left running by a failed test (it would otherwise reconnect forever).
    static func kill(_ process: ChildProcess) {
        if !process.hasExited { process.signal(SIGKILL) }
    }
}

extension TestGateway {
    /// An IMClient logged in as `user` on `device`.
    func client(_ user: String, device: String) async throws -> IMClient {
        try await tracked(IMClient.connect(.init(port: port, token: try await minter.mint(user: user), deviceID: device)))
    }
}

/// The next chat message among a client's events (other events skipped).
func nextMessage(_ events: Collector<IMClient.Event>) async throws -> IMClient.Message {
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
