import IMWire

/// IMWire's per-filter SUBSCRIBE result (Mosquitto has a type of the same name; this
/// file sees only IMWire's).
typealias WireSubscriptionResult = SubscriptionResult
