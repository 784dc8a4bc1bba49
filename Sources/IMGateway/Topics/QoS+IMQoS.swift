import IMWire
import Mosquitto

// The wire's QoS and MQTT's are the same three levels, kept as two types because IMWire and
// Mosquitto know nothing of each other; the gateway converts between them, totally.

extension QoS {
    /// The MQTT level of a wire QoS.
    init(_ qos: IMQoS) {
        switch qos {
        case .atMostOnce: self = .atMostOnce
        case .atLeastOnce: self = .atLeastOnce
        case .exactlyOnce: self = .exactlyOnce
        }
    }
}

extension IMQoS {
    /// The wire level of an MQTT QoS.
    init(_ qos: QoS) {
        switch qos {
        case .atMostOnce: self = .atMostOnce
        case .atLeastOnce: self = .atLeastOnce
        case .exactlyOnce: self = .exactlyOnce
        }
    }
}

extension GatewayConfiguration.PubSubSettings {
    /// `max_qos` as a wire QoS (the configuration is validated to 0–2; clamped here).
    var maxIMQoS: IMQoS { IMQoS.allCases[min(max(maxQoS, 0), IMQoS.allCases.count - 1)] }
}
