import CMosquitto

/// MQTT v5 subscription options.
public struct SubscribeOptions: Sendable, Hashable {
    /// Do not deliver our own publishes back to us.
    public var noLocal: Bool
    /// Keep the RETAIN flag as published on forwarded messages.
    public var retainAsPublished: Bool
    /// When the broker sends retained messages for this subscription.
    public var retainHandling: RetainHandling

    public init(noLocal: Bool = false, retainAsPublished: Bool = false, retainHandling: RetainHandling = .sendOnSubscribe) {
        self.noLocal = noLocal
        self.retainAsPublished = retainAsPublished
        self.retainHandling = retainHandling
    }

    /// v5 retain handling.
    public enum RetainHandling: Sendable, Hashable {
        /// Send retained messages on every subscribe (MQTT default).
        case sendOnSubscribe
        /// Only when the subscription is new.
        case sendIfNew
        /// Never.
        case doNotSend
    }

    /// libmosquitto's `options` bit field (MQTT_SUB_OPT_*).
    var mosquittoOptions: Int32 {
        var bits: UInt32 = 0
        if noLocal { bits |= MQTT_SUB_OPT_NO_LOCAL.rawValue }
        if retainAsPublished { bits |= MQTT_SUB_OPT_RETAIN_AS_PUBLISHED.rawValue }
        switch retainHandling {
        case .sendOnSubscribe: bits |= MQTT_SUB_OPT_SEND_RETAIN_ALWAYS.rawValue
        case .sendIfNew: bits |= MQTT_SUB_OPT_SEND_RETAIN_NEW.rawValue
        case .doNotSend: bits |= MQTT_SUB_OPT_SEND_RETAIN_NEVER.rawValue
        }
        return Int32(bits)
    }
}

extension MosquittoClient {
    /// The broker's answer for one filter of a SUBSCRIBE.
    public enum SubscriptionResult: Sendable, Hashable {
        /// Accepted with this maximum QoS.
        case granted(QoS)
        /// Refused (v5 reason code, e.g. 0x87 not authorised; 0x80 on 3.1.1).
        case rejected(ReasonCode)
    }
}
