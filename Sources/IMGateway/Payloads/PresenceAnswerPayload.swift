import IMWire

/// One device's answer to a ``PresenceProbePayload``, on the asking user's
/// `{prefix}/u/{user}/signal` at QoS 0.
///
/// ```json
/// {"presence":{"device":"phone-1","gateway":"gw-1","status":"online","ts":1735689600123},"to":"tab-1","user":"dave"}
/// ```
/// `presence` is what the device's retained presence holds (the same `ts`, its login), so a
/// watcher that also got the retained message can tell the two apart from a change.
public struct PresenceAnswerPayload: Codable, Hashable, Sendable {
    /// The answering device's presence.
    public var presence: PresencePayload
    /// The answering device's user.
    public var user: String
    /// The asking device: the answer is for it alone (the user's other devices drop it).
    public var to: String

    /// Creates an answer of `user`'s device to the device `to`.
    public init(presence: PresencePayload, user: String, to: String) {
        self.presence = presence
        self.user = user
        self.to = to
    }
}
