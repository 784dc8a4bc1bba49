/// SUBSCRIBE (CONTROL, op 0x0040): subscribe to topic filters in the generic topic space.
///
/// Body: one container of records `CONTAINER{TOPIC, QOS}`. The gateway answers with an ACK
/// carrying one ``SubscriptionResult`` per filter, in the same order (like MQTT's SUBACK).
public struct Subscribe: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .subscribe }

    /// One requested subscription.
    public struct Subscription: Hashable, Sendable {
        /// The topic filter; `+` and `#` wildcards as in MQTT.
        public var filter: String
        /// The maximum QoS wanted.
        public var qos: IMQoS

        /// Creates a subscription request.
        public init(filter: String, qos: IMQoS) {
            self.filter = filter
            self.qos = qos
        }
    }

    /// The requested subscriptions.
    public var subscriptions: [Subscription]

    /// Creates a SUBSCRIBE.
    public init(subscriptions: [Subscription]) { self.subscriptions = subscriptions }

    public init(fields: TLVFields) throws(IMWireError) {
        self.subscriptions = []
        for record in try fields.list(of: .container) {
            let items = try record.items()
            self.subscriptions.append(
                Subscription(
                    filter: try items.string(.topic, length: IMWire.topicLength),
                    qos: try items.required(.qos).qos()
                )
            )
        }
    }

    public func write(to writer: inout TLVWriter) {
        writer.writeContainer { list in
            for subscription in self.subscriptions {
                list.writeContainer { record in
                    record.write(.topic, string: subscription.filter)
                    record.write(.qos, integer: subscription.qos.rawValue)
                }
            }
        }
    }
}
