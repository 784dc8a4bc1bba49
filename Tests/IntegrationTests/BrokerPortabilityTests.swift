import Foundation
import IMGateway
import IMWire
import Mosquitto
import Testing
import IMTestSupport

/// imgw reads what the broker announces in CONNACK and adapts, or refuses with a clear line:
/// real imgw processes on mosquitto brokers configured to announce less.
@Suite("Broker portability: what the broker's CONNACK announces", .stopsWhatItStarts, .timeLimit(.minutes(2)))
struct BrokerPortabilityTests {
    @Test("MosquittoClient reports the CONNACK's properties: mosquitto with max_qos 1, retain_available false, max_packet_size, max_keepalive")
    func capabilities() async throws {
        var options = TestBroker.Options()
        options.listenerLines = ["max_qos 1"]
        options.globalLines = ["retain_available false", "max_packet_size 20000", "max_keepalive 20"]
        let broker = try await TestBroker.start(options)
        let client = makeClient(broker) { $0.keepalive = 60 }
        let result = try await client.connect()
        #expect(result.capabilities.maximumQoS == .atLeastOnce)
        #expect(!result.capabilities.retainAvailable)
        #expect(result.capabilities.maximumPacketSize == 20000)
        #expect(result.capabilities.serverKeepAlive == 20)
        #expect(result.capabilities.wildcardSubscriptionAvailable)

        // A broker with none of these set announces the defaults.
        let plain = try await TestBroker.start()
        let other = makeClient(plain)
        let defaults = try await other.connect().capabilities
        #expect(defaults.maximumQoS == .exactlyOnce)
        #expect(defaults.retainAvailable)
        #expect(defaults.maximumPacketSize == nil)
        await client.close()
        await other.close()
    }

    @Test("a broker that takes at most QoS 1 (mosquitto max_qos 1): imgw says so, offers no QoS 2 chat, refuses one with QOS_NOT_SUPPORTED, and carries QoS 1")
    func maximumQoS1() async throws {
        var options = TestBroker.Options()
        options.listenerLines = ["max_qos 1"]
        let broker = try await TestBroker.start(options)
        let gateway = try await IMGWProcess.start(broker: broker, until: "the broker takes at most QoS 1")

        let probe = try await TestDevice.connect(port: gateway.port)
        try await probe.send(.hello(Hello(features: [.qos2Chat])))
        let (_, answer) = try await probe.next(within: 10, "HELLO_OK")
        guard case .helloOK(let hello) = answer else { throw TestError("expected HELLO_OK, got \(answer)") }
        #expect(!hello.features.contains(.qos2Chat), "no QoS 2 chat on this broker")
        #expect(hello.features.contains(.groups))

        let alice = try await gateway.device("alice")
        let bob = try await gateway.device("bob")
        let sequence = try await alice.send(.chat(ChatSend(to: "bob", messageID: "q2", content: .text("exactly once?"), qos: .exactlyOnce)))
        let refused = try await alice.nextAck(of: sequence)
        #expect(refused.error == .qosNotSupported)
        #expect(refused.errorMessage?.contains("at most QoS 1") == true, "\(refused.errorMessage ?? "")")
        // The session is unharmed (a QoS 2 PUBLISH would have ended it): QoS 1 goes through.
        #expect(try await alice.chat(to: "bob", id: "q1", text: "at least once").error == nil)
        let (frame, message) = try await bob.next(within: 10, "bob's delivery")
        guard case .delivery(let delivery) = message else { throw TestError("expected a delivery, got \(message)") }
        #expect(delivery.messageID == "q1")
        try await bob.ack(frame)
        await gateway.stop()
    }

    @Test("a broker that keeps no retained messages (retain_available false): imgw logs why it cannot work there, and a LOGIN gets BROKER_UNAVAILABLE with the reason")
    func noRetain() async throws {
        var options = TestBroker.Options()
        options.globalLines = ["retain_available false"]
        let broker = try await TestBroker.start(options)
        let gateway = try await IMGWProcess.start(broker: broker, until: "Retain Available 0")
        #expect(gateway.output.text.withLock { $0 }.contains("the broker cannot carry imgw"))

        let device = try await TestDevice.connect(port: gateway.port)
        try await device.send(.login(LoginRequest(token: try await TokenMinter(secret: IMGWProcess.secret).mint(user: "alice"), deviceID: "phone")))
        let error = try await device.nextError()
        #expect(error.code == .brokerUnavailable)
        #expect(error.message?.contains("Retain Available 0") == true, "\(error.message ?? "")")
        try await device.closed()
        await gateway.stop()

        // imgw check-config says the same, and fails.
        let config = broker.directory.appendingPathComponent("check.yaml")
        try "broker:\n  url: mqtt://127.0.0.1:\(broker.port)\n".write(to: config, atomically: true, encoding: .utf8)
        let (status, output) = try await runCapturing(IMGWProcess.executable, ["check-config", "--config", config.path])
        #expect(status != 0)
        #expect(output.contains("broker: error: imgw cannot work with mqtt://127.0.0.1:\(broker.port): the broker keeps no retained messages"), "\(output)")
    }
}
