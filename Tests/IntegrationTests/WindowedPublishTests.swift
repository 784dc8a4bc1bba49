@testable import IMGateway
import Mosquitto
import Foundation
import Testing
import IMTestSupport

/// How a device session publishes a group's copies (``WindowedPublish``), against a real
/// mosquitto: all in order, a window at a time, the first refusal thrown without waiting forever.
@Suite("Windowed publishes on the MQTT loop against a real broker", .stopsWhatItStarts, .timeLimit(.minutes(2)))
struct WindowedPublishTests {
    /// A broker whose anonymous clients may use `ok/#` only.
    private func broker() async throws -> TestBroker {
        var options = TestBroker.Options()
        let acl = FileManager.default.temporaryDirectory.appendingPathComponent("imgw-acl-\(UInt32.random(in: 0...UInt32.max))")
        try "topic readwrite ok/#\n".write(to: acl, atomically: true, encoding: .utf8)
        TestResources.track { try? FileManager.default.removeItem(at: acl) }
        options.globalLines = ["acl_file \(acl.path)"]
        return try await TestBroker.start(options)
    }

    private static func publish(_ topic: String, _ text: String) -> OutgoingPublish {
        OutgoingPublish(topic: topic, payload: Array(text.utf8), qos: .atLeastOnce)
    }

    @Test("200 publishes, a window at a time: the broker has every one, and a subscriber gets them in order", arguments: [1, 8, 500])
    func allInOrder(window: Int) async throws {
        let broker = try await broker()
        let subscriber = makeClient(broker)
        let messages = try await connected(subscriber)
        try await subscriber.subscribe("ok/#", qos: .atLeastOnce)
        let publisher = makeClient(broker)
        try await publisher.connect()
        let texts = (0..<200).map { "m\($0)" }
        try await WindowedPublish.run(texts.map { Self.publish("ok/\($0.hasSuffix("7") ? "a" : "b")", $0) }, window: window, on: publisher)
        var received: [String] = []
        for _ in texts { received.append(String(decoding: try await messages.next(within: 10, "a publish").payload, as: UTF8.self)) }
        #expect(received == texts)
    }

    @Test("a publish the broker refuses: run throws publishRejected, the ones before it arrived")
    func refusal() async throws {
        let broker = try await broker()
        let subscriber = makeClient(broker)
        let messages = try await connected(subscriber)
        try await subscriber.subscribe("ok/#", qos: .atLeastOnce)
        let publisher = makeClient(broker)
        try await publisher.connect()
        let publishes = (0..<20).map { Self.publish($0 == 10 ? "denied/x" : "ok/x", "m\($0)") }
        await #expect {
            try await WindowedPublish.run(publishes, window: 4, on: publisher)
        } throws: { error in
            if case MosquittoError.publishRejected = error { return true }
            return false
        }
        // The first ten went out before the refusal.
        for index in 0..<10 {
            #expect(String(decoding: try await messages.next(within: 10, "publish \(index)").payload, as: UTF8.self) == "m\(index)")
        }
    }

    @Test("a client that is not connected: run throws at once")
    func notConnected() async throws {
        let broker = try await broker()
        let publisher = makeClient(broker)
        await #expect(throws: MosquittoError.self) {
            try await WindowedPublish.run([Self.publish("ok/x", "m")], window: 4, on: publisher)
        }
    }
}
