import NIOCore

/// PUBLISH (DATA, op 0x0042), in both directions: a message on a generic topic.
///
/// Client to gateway: the gateway publishes it and ACKs once the broker accepted it
/// (negative: FORBIDDEN, INVALID_TOPIC). Gateway to client: a message matching a
/// subscription, with SERVER_TIME; the device ACKs it.
public struct Publish: IMMessageBody {
    public static var frameType: IMFrameType { .data }
    public static var operation: IMOperation { .publish }

    /// The topic (no wildcards).
    public var topic: String
    /// The payload, opaque.
    public var payload: ByteBuffer
    /// QoS 0 (default), 1 or 2.
    public var qos: IMQoS
    /// Whether the broker keeps it as the topic's retained message (or, inbound, it was one).
    public var retain: Bool
    /// Gateway to client: when the gateway received it, Unix milliseconds.
    public var serverTime: UInt64?
    /// Set when this message may have been sent before.
    public var resend: Bool

    /// Creates a PUBLISH.
    public init(
        topic: String,
        payload: ByteBuffer,
        qos: IMQoS = .atMostOnce,
        retain: Bool = false,
        serverTime: UInt64? = nil,
        resend: Bool = false
    ) {
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.serverTime = serverTime
        self.resend = resend
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.topic = try fields.string(.topic, length: IMWire.topicLength)
        self.payload = try fields.optional(.payload)?.value ?? ByteBuffer()
        self.qos = try fields.qos(default: .atMostOnce)
        self.retain = try fields.flag(.retain)
        self.serverTime = try fields.optionalInteger(.serverTime)
        self.resend = try fields.flag(.resend)
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.topic, string: self.topic)
        if self.qos != .atMostOnce { writer.write(.qos, integer: self.qos.rawValue) }
        if self.retain { writer.write(.retain, flag: true) }
        if let serverTime { writer.write(.serverTime, integer: serverTime) }
        if self.resend { writer.write(.resend, flag: true) }
        writer.write(.payload, buffer: self.payload)
    }
}
