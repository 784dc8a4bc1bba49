import Foundation
import IMGateway
import IMWire
import Mosquitto
import Testing
import IMTestSupport

/// `broker.libmosquitto_internals`: which of libmosquitto's private parts imgw uses, said at
/// start and in /metrics, and a gateway that works with none of them.
@Suite("libmosquitto's internals: the switch, the log line, the metric", .stopsWhatItStarts, .timeLimit(.minutes(2)))
struct LibmosquittoInternalsTests {
    static func metric(_ gateway: IMGWProcess, _ part: MosquittoLibrary.Internal) async throws -> Double {
        try await gateway.metric("imgw_libmosquitto_internal{name=\"\(part.rawValue)\"}")
    }

    @Test("by default every internal is in use (here: libmosquitto 2.0 on Linux), unless MOSQUITTO_SWIFT_INTERNALS=off: the log line and the metric say which")
    func defaultsInUse() async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, archive: .none)
        let off = ProcessInfo.processInfo.environment[MosquittoLibrary.environmentVariable] == "off"
        #expect(await gateway.output.waitFor("libmosquitto internals"))
        let line = gateway.output.text.withLock { $0 }.split(separator: "\n").first { $0.contains("libmosquitto internals") } ?? ""
        for part in MosquittoLibrary.Internal.allCases {
            #expect(try await Self.metric(gateway, part) == (off ? 0 : 1), "\(part)")
        }
        // SwiftNIO's channel description, read to mark its sockets close-on-exec: the same switch.
        #expect(try await gateway.metric("imgw_libmosquitto_internal{name=\"close_on_exec\"}") == (off ? 0 : 1))
        #expect(line.contains(off ? "in-use=none" : "off=none"), "\(line)")
        #expect(line.contains("close_on_exec"), "\(line)")
        await gateway.stop()
        await broker.stop()
    }

    @Test("libmosquitto_internals: false turns every one off (log line, metric 0), and chat, receipts and a session kept across a reconnect still work")
    func switchedOff() async throws {
        let broker = try await TestBroker.start()
        let gateway = try await IMGWProcess.start(broker: broker, brokerLines: ["libmosquitto_internals: false"], archive: .none)
        #expect(await gateway.output.waitFor("libmosquitto internals"))
        let line = gateway.output.text.withLock { $0 }.split(separator: "\n").first { $0.contains("libmosquitto internals") } ?? ""
        #expect(line.contains("in-use=none"), "\(line)")
        for part in MosquittoLibrary.Internal.allCases {
            #expect(try await Self.metric(gateway, part) == 0, "\(part)")
        }
        #expect(try await gateway.metric("imgw_libmosquitto_internal{name=\"close_on_exec\"}") == 0)

        // bob has a session, goes away; alice writes to him; bob's next login resumes the
        // session (CONNECT's session expiry was sent without the asynchronous connect) and
        // gets the message.
        let bobFirst = try await gateway.device("bob")
        await bobFirst.drop()
        let alice = try await gateway.device("alice")
        let ack = try await alice.chat(to: "bob", id: "m1", text: "while away")
        #expect(ack.error == nil)
        let (bob, ok) = try await gateway.login("bob")
        #expect(ok.sessionResumed == true, "the broker kept bob's session: its expiry reached CONNECT")
        let delivery = try await bob.nextDelivery(within: 10, "the message sent while away")
        #expect(delivery.messageID == "m1" && delivery.from == "alice")
        await gateway.stop()
        await broker.stop()
    }
}
