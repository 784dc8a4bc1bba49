/// The result for one filter of a SUBSCRIBE, carried in its ACK as a record
/// `CONTAINER{TOPIC, QOS}` (granted) or `CONTAINER{TOPIC, ERROR_CODE, ERROR_MESSAGE?}`
/// (refused, with the broker's reason when the broker refused it).
public struct SubscriptionResult: Hashable, Sendable {
    /// The outcome for one filter.
    public enum Outcome: Hashable, Sendable {
        /// Subscribed with this maximum QoS.
        case granted(IMQoS)
        /// Refused, e.g. FORBIDDEN or INVALID_TOPIC.
        case refused(IMErrorCode)
    }

    /// The filter, as requested.
    public var filter: String
    /// Granted or refused.
    public var outcome: Outcome
    /// Why it was refused, in words (e.g. the broker's reason), if the gateway said.
    public var reason: String?

    /// Creates a result.
    public init(filter: String, outcome: Outcome, reason: String? = nil) {
        self.filter = filter
        self.outcome = outcome
        self.reason = reason
    }

    init(fields: TLVFields) throws(IMWireError) {
        self.filter = try fields.string(.topic, length: IMWire.topicLength)
        if let code = try fields.optionalInteger(.errorCode, as: UInt16.self) {
            self.outcome = .refused(IMErrorCode(code))
            self.reason = try fields.optionalString(.errorMessage)
        } else {
            self.outcome = .granted(try fields.required(.qos).qos())
        }
    }

    func write(to writer: inout TLVWriter) {
        writer.writeContainer { record in
            record.write(.topic, string: self.filter)
            switch self.outcome {
            case .granted(let qos): record.write(.qos, integer: qos.rawValue)
            case .refused(let code):
                record.write(.errorCode, integer: code.rawValue)
                if let reason = self.reason { record.write(.errorMessage, string: reason) }
            }
        }
    }
}
