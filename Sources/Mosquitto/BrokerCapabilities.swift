import CMosquitto

#if canImport(Glibc)
import Glibc
#endif

/// What a broker announced in its CONNACK (MQTT v5 properties, section 3.2.2.3 of the
/// specification), each property it left out at the specification's default. A v3.1.1
/// CONNACK carries none, so every field has its default there.
public struct BrokerCapabilities: Sendable, Hashable {
    /// QoS 1 and 2 publishes the broker takes from this client unacknowledged at once
    /// (Receive Maximum; 65,535 when absent). libmosquitto holds back what exceeds it.
    public var receiveMaximum: UInt16 = 65535
    /// The highest QoS the broker accepts in PUBLISH (Maximum QoS; 2 when absent). A
    /// PUBLISH above it is a protocol error that ends the connection.
    public var maximumQoS: QoS = .exactlyOnce
    /// Whether the broker keeps retained messages (Retain Available; true when absent).
    public var retainAvailable = true
    /// The largest packet the broker accepts, bytes (Maximum Packet Size; nil: only the
    /// protocol's limit). libmosquitto refuses a larger PUBLISH before sending it.
    public var maximumPacketSize: UInt32?
    /// Topic aliases the broker accepts from this client (Topic Alias Maximum; 0 when absent).
    public var topicAliasMaximum: UInt16 = 0
    /// Whether filters may have wildcards (Wildcard Subscription Available; true when absent).
    public var wildcardSubscriptionAvailable = true
    /// Whether subscription identifiers are supported (true when absent).
    public var subscriptionIdentifiersAvailable = true
    /// Whether `$share/...` filters are supported (Shared Subscription Available; true when absent).
    public var sharedSubscriptionAvailable = true
    /// The keepalive the broker imposes instead of the client's, seconds (Server Keep Alive).
    public var serverKeepAlive: UInt16?
    /// The session expiry the broker uses instead of the client's, seconds (Session Expiry
    /// Interval in CONNACK: the broker's own, smaller value).
    public var sessionExpiryInterval: UInt32?
    /// The broker's explanation, if it gave one (Reason String).
    public var reasonString: String?

    /// Every property at its default: what a broker that announces nothing offers.
    public init() {}

    /// Reads the properties of a CONNACK (libmosquitto's `on_connect_v5` property list).
    init(connackProperties list: OpaquePointer?) {
        guard let list else { return }
        var byte: UInt8 = 0
        var short: UInt16 = 0
        var word: UInt32 = 0
        func readByte(_ property: mqtt5_property) -> UInt8? {
            mosquitto_property_read_byte(list, Int32(property.rawValue), &byte, false) != nil ? byte : nil
        }
        func readShort(_ property: mqtt5_property) -> UInt16? {
            mosquitto_property_read_int16(list, Int32(property.rawValue), &short, false) != nil ? short : nil
        }
        func readWord(_ property: mqtt5_property) -> UInt32? {
            mosquitto_property_read_int32(list, Int32(property.rawValue), &word, false) != nil ? word : nil
        }
        if let value = readShort(MQTT_PROP_RECEIVE_MAXIMUM) { receiveMaximum = value }
        if let value = readByte(MQTT_PROP_MAXIMUM_QOS), let qos = QoS(rawValue: value) { maximumQoS = qos }
        if let value = readByte(MQTT_PROP_RETAIN_AVAILABLE) { retainAvailable = value != 0 }
        maximumPacketSize = readWord(MQTT_PROP_MAXIMUM_PACKET_SIZE)
        if let value = readShort(MQTT_PROP_TOPIC_ALIAS_MAXIMUM) { topicAliasMaximum = value }
        if let value = readByte(MQTT_PROP_WILDCARD_SUB_AVAILABLE) { wildcardSubscriptionAvailable = value != 0 }
        if let value = readByte(MQTT_PROP_SUBSCRIPTION_ID_AVAILABLE) { subscriptionIdentifiersAvailable = value != 0 }
        if let value = readByte(MQTT_PROP_SHARED_SUB_AVAILABLE) { sharedSubscriptionAvailable = value != 0 }
        serverKeepAlive = readShort(MQTT_PROP_SERVER_KEEP_ALIVE)
        sessionExpiryInterval = readWord(MQTT_PROP_SESSION_EXPIRY_INTERVAL)
        var text: UnsafeMutablePointer<CChar>?
        if mosquitto_property_read_string(list, Int32(MQTT_PROP_REASON_STRING.rawValue), &text, false) != nil, let text {
            reasonString = String(cString: text)
            free(text)
        }
    }
}
