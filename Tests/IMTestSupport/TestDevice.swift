import IMWire
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// A minimal TLV client for tests: frames in, frames out, nothing clever (the client
/// library proper is IMClient).
package final class TestDevice: Sendable {
    /// Every frame the gateway sent, in order.
    package let frames: Collector<IMFrame>
    private let outbound: NIOAsyncChannelOutboundWriter<IMFrame>
    private let channel: any Channel
    private let sequence = Atomic<UInt32>(0)

    /// Connects; with `trusting` (a CA file) over TLS, verifying the gateway as "localhost".
    package static func connect(port: Int, host: String = "127.0.0.1", trusting caFile: String? = nil) async throws -> TestDevice {
        let tls = try caFile.map { caFile in
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.trustRoots = .file(caFile)
            return try NIOSSLContext(configuration: configuration)
        }
        let async = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: tls, serverHostname: "localhost"))
                    }
                    try channel.pipeline.syncOperations.addHandlers([
                        ByteToMessageHandler(IMFrameDecoder()),
                        MessageToByteHandler(IMFrameEncoder()),
                    ])
                    return try NIOAsyncChannel<IMFrame, IMFrame>(wrappingChannelSynchronously: channel)
                }
            }
        let (stream, sink) = AsyncStream.makeStream(of: IMFrame.self)
        let (writers, writerSink) = AsyncStream.makeStream(of: NIOAsyncChannelOutboundWriter<IMFrame>.self)
        Task {
            try? await async.executeThenClose { inbound, outbound in
                writerSink.yield(outbound)
                writerSink.finish()
                for try await frame in inbound { sink.yield(frame) }
            }
            writerSink.finish()
            sink.finish()
        }
        var iterator = writers.makeAsyncIterator()
        guard let outbound = await iterator.next() else { throw TestError("connection to \(port) closed at once") }
        let device = TestDevice(channel: async.channel, outbound: outbound, frames: Collector(stream))
        TestResources.track { await device.drop() }
        return device
    }

    private init(channel: any Channel, outbound: NIOAsyncChannelOutboundWriter<IMFrame>, frames: Collector<IMFrame>) {
        self.channel = channel
        self.outbound = outbound
        self.frames = frames
    }

    /// Sends a message with the next sequence number; returns that number.
    @discardableResult
    package func send(_ message: IMMessage, sessionID: UInt16 = 0) async throws -> UInt32 {
        let sequence = self.sequence.add(1, ordering: .relaxed).newValue
        try await outbound.write(message.frame(sequence: sequence, timestamp: 1_700_000_000, sessionID: sessionID))
        return sequence
    }

    package func write(_ frame: IMFrame) async throws {
        try await outbound.write(frame)
    }

    /// Sends `messages` with the next sequence numbers, in one write (one flush).
    package func sendAll(_ messages: [IMMessage], sessionID: UInt16 = 0) async throws {
        let first = self.sequence.add(UInt32(messages.count), ordering: .relaxed).newValue - UInt32(messages.count) + 1
        try await outbound.write(contentsOf: messages.enumerated().map { index, message in
            message.frame(sequence: first + UInt32(index), timestamp: 1_700_000_000, sessionID: sessionID)
        })
    }

    /// The next frame, decoded.
    package func next(within seconds: Double = 10, _ what: String = "a frame") async throws -> (IMFrame, IMMessage) {
        let frame = try await frames.next(within: seconds, what)
        return (frame, try IMMessage(frame: frame))
    }

    /// Logs in; returns LOGIN_OK or throws with what came instead.
    @discardableResult
    package func login(token: String, device: String? = nil) async throws -> LoginOK {
        try await send(.login(LoginRequest(token: token, deviceID: device)))
        let (_, message) = try await next(within: 10, "LOGIN_OK")
        guard case .loginOK(let ok) = message else { throw TestError("expected LOGIN_OK, got \(message)") }
        return ok
    }

    /// Sends a chat message and waits for its ACK, skipping other frames (a DELIVERY skipped is
    /// ACKed, see ``nextAck(of:within:)``).
    package func chat(to: String, id: String, text: String, resend: Bool = false, within seconds: Double = 10) async throws -> Ack {
        let sequence = try await send(.chat(ChatSend(to: to, messageID: id, content: .text(text), resend: resend)))
        return try await nextAck(of: sequence, within: seconds)
    }

    /// Sends a chat to `to` for each of `ids`, keeping at most `window` waiting for their ACK;
    /// returns each id's ACK (a DELIVERY meanwhile is ACKed and skipped).
    package func chatMany(to: String, ids: [String], text: String, window: Int = 32, within seconds: Double = 10) async throws -> [String: Ack] {
        var pending: [UInt32: String] = [:]
        var acks: [String: Ack] = [:]
        var next = ids.makeIterator()
        var exhausted = false
        while !(exhausted && pending.isEmpty) {
            while !exhausted && pending.count < window {
                guard let id = next.next() else {
                    exhausted = true
                    break
                }
                pending[try await send(.chat(ChatSend(to: to, messageID: id, content: .text(text))))] = id
            }
            guard !pending.isEmpty else { continue }
            let (frame, message) = try await self.next(within: seconds, "an ACK of \(pending.count) chats in flight")
            if case .ack(let ack) = message, let id = pending.removeValue(forKey: ack.sequence) {
                acks[id] = ack
            } else if case .delivery = message {
                try await self.ack(frame)
            }
        }
        return acks
    }

    /// Sends a message to `group` and waits for its ACK (see ``chat(to:id:text:resend:)``).
    package func groupChat(_ group: String, id: String, text: String) async throws -> Ack {
        let sequence = try await send(.chat(ChatSend(group: group, messageID: id, content: .text(text))))
        return try await nextAck(of: sequence)
    }

    /// The next ACK (of `sequence` if given), skipping other frames; a DELIVERY skipped is
    /// ACKed, as a device does (its session holds its own publishes behind an unACKed
    /// delivery, e.g. a carbon of what another device of the user sent).
    package func nextAck(of sequence: UInt32? = nil, within seconds: Double = 10) async throws -> Ack {
        while true {
            let (frame, message) = try await next(within: seconds, "an ACK")
            if case .ack(let ack) = message, sequence == nil || ack.sequence == sequence { return ack }
            if case .delivery = message { try await ack(frame) }
        }
    }

    /// The next DELIVERY, ACKed, skipping other frames.
    package func nextDelivery(within seconds: Double = 10, _ what: String = "a delivery") async throws -> ChatDelivery {
        while true {
            let (frame, message) = try await next(within: seconds, what)
            if case .delivery(let delivery) = message {
                try await ack(frame)
                return delivery
            }
        }
    }

    /// The next ERROR, skipping other frames.
    package func nextError(within seconds: Double = 10) async throws -> ErrorNotice {
        while true {
            let (_, message) = try await next(within: seconds, "an ERROR")
            if case .error(let notice) = message { return notice }
        }
    }

    /// Waits until the gateway closes the connection (a frame before that is skipped); throws
    /// if it stays open for `seconds`.
    package func closed(within seconds: Double = 10) async throws {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while true {
            let left = deadline - ContinuousClock.now
            guard left > .zero else { throw TestError("the gateway did not close the connection in \(seconds) s") }
            do {
                _ = try await frames.next(within: left / .seconds(1), "the close")
            } catch {
                if isActive { throw error }
                return
            }
        }
    }

    /// ACKs a frame the gateway sent (a delivery).
    package func ack(_ frame: IMFrame) async throws {
        try await outbound.write(frame.ack(timestamp: 1_700_000_000))
    }

    /// Closes the TCP connection without LOGOUT (an abrupt drop, from the gateway's view).
    package func drop() async {
        try? await channel.close()
    }

    package var isActive: Bool { channel.isActive }
}
