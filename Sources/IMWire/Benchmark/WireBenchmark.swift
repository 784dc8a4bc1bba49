import NIOCore

/// Measures encoder and decoder throughput on representative frames.
///
/// ```swift
/// let result = try WireBenchmark.run()
/// print(result.table)
/// ```
public enum WireBenchmark {
    /// One kind of frame to measure: a DELIVERY whose text content makes the body about `bodyLength` bytes.
    public struct Case: Hashable, Sendable, CustomStringConvertible {
        /// Approximate plain body length in bytes.
        public var bodyLength: Int
        /// Whether the body is sent zlib-compressed.
        public var compressed: Bool

        /// Creates a case.
        public init(bodyLength: Int, compressed: Bool) {
            self.bodyLength = bodyLength
            self.compressed = compressed
        }

        /// E.g. `1 KiB zlib`.
        public var description: String {
            let size = self.bodyLength >= 1024 ? "\(self.bodyLength / 1024) KiB" : "\(self.bodyLength) B"
            return "\(size) \(self.compressed ? "zlib" : "plain")"
        }

        /// 64 B, 1 KiB and 64 KiB bodies, plain and compressed.
        public static let standard: [Case] = [64, 1024, 65536].flatMap { length in
            [Case(bodyLength: length, compressed: false), Case(bodyLength: length, compressed: true)]
        }
    }

    /// What is measured.
    public enum Operation: String, Hashable, Sendable, CaseIterable {
        /// ``IMFrameEncoder``: CRC-32, compression if asked, header and body into a buffer.
        case encode
        /// ``IMFrameDecoder``: header checks, CRC-32, inflation, TLV validation.
        case decode
        /// Decoding plus ``IMMessage/init(frame:)``.
        case decodeMessage = "decode+message"
    }

    /// One measurement.
    public struct Measurement: Hashable, Sendable {
        /// The frame kind.
        public var benchmarkCase: Case
        /// The operation.
        public var operation: Operation
        /// Length of one encoded frame on the wire (header included).
        public var wireBytesPerFrame: Int
        /// Frames processed.
        public var frames: Int
        /// Time taken.
        public var elapsed: Duration

        /// Frames per second.
        public var framesPerSecond: Double { Double(self.frames) / self.seconds }
        /// Wire bytes (header and transmitted body) per second, in MB (10^6 bytes).
        public var megabytesPerSecond: Double {
            Double(self.frames * self.wireBytesPerFrame) / self.seconds / 1_000_000
        }

        private var seconds: Double {
            let (s, attoseconds) = self.elapsed.components
            return max(Double(s) + Double(attoseconds) / 1e18, 1e-9)
        }
    }

    /// All measurements of a run.
    public struct Result: Hashable, Sendable {
        /// In case order, then operation order.
        public var measurements: [Measurement]

        /// A plain-text table: case, operation, frame size, frames/s, MB/s.
        public var table: String {
            var lines = ["case           operation        frame B      frames/s        MB/s"]
            for m in self.measurements {
                lines.append(
                    pad(m.benchmarkCase.description, 15) + pad(m.operation.rawValue, 15)
                        + pad(String(m.wireBytesPerFrame), 10, left: true)
                        + pad(String(Int(m.framesPerSecond.rounded())), 14, left: true)
                        + pad(String(Int(m.megabytesPerSecond.rounded())), 12, left: true)
                )
            }
            return lines.joined(separator: "\n")
        }
    }

    /// Runs every case and operation, each for at least `minimumDuration`.
    public static func run(
        cases: [Case] = Case.standard,
        operations: [Operation] = Operation.allCases,
        minimumDuration: Duration = .milliseconds(300)
    ) throws(IMWireError) -> Result {
        var measurements: [Measurement] = []
        for benchmarkCase in cases {
            let frame = self.frame(for: benchmarkCase)
            let encoder = IMFrameEncoder()
            let wire = try encoder.encode(frame)
            for operation in operations {
                measurements.append(
                    try self.measure(operation, benchmarkCase, frame: frame, wire: wire, minimumDuration: minimumDuration)
                )
            }
        }
        return Result(measurements: measurements)
    }

    /// The representative frame of a case: a DELIVERY with text made of common words.
    public static func frame(for benchmarkCase: Case) -> IMFrame {
        let overhead = 45  // FROM, MESSAGE_ID, SERVER_TIME and the TEXT item header
        var text = ""
        var seed: UInt32 = 0x1234_5678
        let words = ["the", "gateway", "sends", "a", "message", "to", "every", "device", "of", "user", "hello", "ok"]
        while text.utf8.count < max(1, benchmarkCase.bodyLength - overhead) {
            seed = seed &* 1_664_525 &+ 1_013_904_223
            text += words[Int(seed >> 16) % words.count] + " "
        }
        let delivery = ChatDelivery(
            from: "alice",
            messageID: "m-000001",
            serverTime: 1_735_689_600_123,
            content: .text(String(text.prefix(max(1, benchmarkCase.bodyLength - overhead))))
        )
        return delivery.frame(
            sequence: 1,
            timestamp: 1_735_689_600,
            sessionID: 1,
            compressType: benchmarkCase.compressed ? .zlib : .none
        )
    }

    private static func measure(
        _ operation: Operation,
        _ benchmarkCase: Case,
        frame: IMFrame,
        wire: ByteBuffer,
        minimumDuration: Duration
    ) throws(IMWireError) -> Measurement {
        // Batches of about 1 MiB of wire bytes, repeated until the minimum duration has passed.
        let batch = max(1, (1 << 20) / wire.readableBytes)
        var stream = ByteBufferAllocator().buffer(capacity: batch * wire.readableBytes)
        for _ in 0..<batch { stream.writeImmutableBuffer(wire) }
        let encoder = IMFrameEncoder()
        var out = ByteBufferAllocator().buffer(capacity: stream.readableBytes)
        var frames = 0
        var sink = 0
        let clock = ContinuousClock()
        let start = clock.now
        repeat {
            switch operation {
            case .encode:
                out.clear()
                for _ in 0..<batch { try encoder.encode(data: frame, out: &out) }
                sink &+= out.readableBytes
            case .decode, .decodeMessage:
                var input = stream
                var decoder = IMFrameDecoder()
                while let decoded = try decoder.decode(buffer: &input) {
                    sink &+= decoded.body.readableBytes
                    if operation == .decodeMessage, case .delivery(let d) = try IMMessage(frame: decoded) {
                        sink &+= d.messageID.utf8.count
                    }
                }
            }
            frames += batch
        } while clock.now - start < minimumDuration
        let elapsed = clock.now - start
        precondition(sink != 0)
        return Measurement(
            benchmarkCase: benchmarkCase,
            operation: operation,
            wireBytesPerFrame: wire.readableBytes,
            frames: frames,
            elapsed: elapsed
        )
    }
}

private func pad(_ string: String, _ width: Int, left: Bool = false) -> String {
    let fill = String(repeating: " ", count: max(0, width - string.count))
    return left ? fill + string : string + fill
}
