import IMWire

/// A typing state on `{prefix}/u/{user}/signal`, at QoS 0 with a message expiry of
/// ``TypingState/lifetime``: never queued for an offline device.
///
/// ```json
/// {"from":"alice","state":"typing","ts":1735689600123}
/// ```
/// `group` is present for a group conversation; `state` is `stopped`, `typing`, `recording`
/// or `away`.
public struct TypingPayload: Codable, Hashable, Sendable {
    /// Who is typing.
    public var from: String
    /// The group conversation, if it is one.
    public var group: String?
    /// The state's name.
    public var state: String
    /// When the gateway took it, Unix milliseconds.
    public var ts: UInt64

    /// Creates a typing payload.
    public init(from: String, group: String? = nil, state: TypingState, ts: UInt64) {
        self.from = from
        self.group = group
        self.state = Self.names[Int(state.rawValue)]
        self.ts = ts
    }

    private static let names = ["stopped", "typing", "recording", "away"]

    /// The TYPING notice for a device, checking every field.
    public func notice() throws(PayloadError) -> Typing {
        guard IMIdentifier.isValid(from) else { throw .invalidField("from", value: from) }
        if let group { guard IMIdentifier.isValid(group) else { throw .invalidField("group", value: group) } }
        guard let index = Self.names.firstIndex(of: state), let typing = TypingState(rawValue: UInt8(index)) else {
            throw .invalidField("state", value: state)
        }
        return Typing(group: group, from: from, state: typing)
    }
}
