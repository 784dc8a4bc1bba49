/// A message received from the broker.
public struct MosquittoMessage: Sendable, Hashable {
    /// The topic it was published to.
    public var topic: String
    /// The payload bytes (copied out of libmosquitto).
    public var payload: [UInt8]
    /// The QoS it was delivered with (the lower of publish and subscription QoS).
    public var qos: QoS
    /// True when the broker sent it as a retained message (on subscribe).
    public var retain: Bool
    /// True when the broker marked it as a possible redelivery (DUP flag).
    public var dup: Bool
    /// MQTT v5 properties (empty on v3.1.1 connections).
    public var properties: MQTTProperties
    /// Identifies this delivery for `MosquittoClient.acknowledge(_:)` in manual
    /// acknowledgement mode; 0 when there is nothing to acknowledge (QoS 0).
    public var deliveryID: UInt64

    public init(
        topic: String, payload: [UInt8], qos: QoS = .atMostOnce, retain: Bool = false, dup: Bool = false,
        properties: MQTTProperties = MQTTProperties(), deliveryID: UInt64 = 0
    ) {
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.dup = dup
        self.properties = properties
        self.deliveryID = deliveryID
    }

    /// The payload decoded as UTF-8 (invalid sequences repaired).
    public var payloadString: String { String(decoding: payload, as: UTF8.self) }
}
