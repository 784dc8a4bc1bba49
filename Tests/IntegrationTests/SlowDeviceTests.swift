import Foundation
import IMGateway
import IMWire
import Mosquitto
import NIOCore
import Testing
import IMTestSupport

@Suite("A device that stops reading", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct SlowDeviceTests {
    @Test("QoS 0 pub/sub for a device that does not read is capped (oldest dropped), the newest arrives once it reads again")
    func qos0IsCappedForANonReader() async throws {
        let gateway = try await TestGateway.start()
        let device = try RawSocket(port: gateway.port)
        try device.send(.login(LoginRequest(token: try await gateway.minter.mint(user: "slow"), deviceID: "phone")), sequence: 1)
        _ = try await device.readFrames { frame in if case .loginOK? = try? IMMessage(frame: frame) { true } else { false } }
        try device.send(.subscribe(Subscribe(subscriptions: [.init(filter: "im/t/flood", qos: .atMostOnce)])), sequence: 2)
        let subscribed = try await device.readFrames { frame in frame.header.type == .ack && (try? Ack(frame: frame))?.sequence == 2 }
        #expect(subscribed.compactMap { try? Ack(frame: $0) }.last?.error == nil, "subscribed")

        // 24 MB of QoS 0 messages: far more than the socket buffers and the gateway's cap
        // (256 queued) can hold while the device reads nothing; then a marker.
        let total = 3000
        let publisher = makeClient(gateway.broker)
        try await publisher.connect()
        let payload = [UInt8](repeating: 0x61, count: 8192)
        for _ in 0..<total { try await publisher.publish(topic: "im/t/flood", payload: payload, qos: .atMostOnce) }
        try await publisher.publish(topic: "im/t/flood", string: "last", qos: .atMostOnce)
        await publisher.close()

        // Wait until the gateway has taken every message from the broker (its messages_out
        // counter), so that reading cannot start while the flood is still arriving.
        let metrics = try #require(await gateway.server.metrics?.localAddress().port)
        var handled = 0.0
        for _ in 0..<600 where handled < Double(total + 1) {
            handled = (try? await scrapeMetric("imgw_messages_out_total", port: metrics)) ?? 0
            if handled < Double(total + 1) { try await Task.sleep(for: .milliseconds(50)) }  // polling a counter
        }
        #expect(handled >= Double(total + 1), "the gateway handled \(handled) of \(total + 1)")

        let frames = try await device.readFrames { frame in
            guard case .publish(let publish)? = try? IMMessage(frame: frame) else { return false }
            return publish.payload.readableBytes == 4
        }
        let publishes = frames.compactMap { frame -> Publish? in
            if case .publish(let publish)? = try? IMMessage(frame: frame) { return publish } else { return nil }
        }
        #expect(publishes.last.map { String(buffer: $0.payload) } == "last", "the newest arrives")
        #expect(publishes.count < total, "\(publishes.count) of \(total + 1) arrived: the oldest were dropped, not all queued")
        #expect(publishes.count > 256, "what the socket buffers held and the capped queue arrived")
        await gateway.stop()
    }
}
