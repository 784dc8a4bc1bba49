import IMWire

/// A question to a user's online devices, on `{prefix}/u/{user}/signal` at QoS 0: "what is
/// your presence?" (`broker.presence_probe`).
///
/// ```json
/// {"device":"tab-1","from":"carol","probe":"presence"}
/// ```
/// Each online device of `user` answers with a ``PresenceAnswerPayload`` on the asker's
/// signal topic. A watcher needs it where the broker's nodes do not share retained messages:
/// the retained presence published through another node never reaches its new subscription,
/// but live messages do.
public struct PresenceProbePayload: Codable, Hashable, Sendable {
    /// What is asked; `presence` is the one question.
    public var probe: String
    /// The asking user.
    public var from: String
    /// The asking device: the one the answers are for.
    public var device: String

    /// The one value of ``probe``.
    public static let presence = "presence"

    /// Creates a presence probe from `device` of `from`.
    public init(from: String, device: String) {
        self.probe = Self.presence
        self.from = from
        self.device = device
    }

    /// Whether every field is usable: a presence probe from valid ids.
    public var isValid: Bool {
        probe == Self.presence && IMIdentifier.isValid(from) && IMIdentifier.isValid(device)
    }
}
