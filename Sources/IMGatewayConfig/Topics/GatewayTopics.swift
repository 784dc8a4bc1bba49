import IMWire

/// The MQTT topics and client ids of the gateway, from one place.
///
/// | Topic | Carries |
/// |---|---|
/// | `{prefix}/u/{user}/inbox` | chat for the user (``ChatPayload``), QoS 1 or 2 |
/// | `{prefix}/u/{user}/presence/{device}` | retained presence of one device (``PresencePayload``) |
/// | `{prefix}/u/{user}/location` | location stream, last fix retained (``LocationPayload``) |
/// | `{prefix}/u/{user}/receipts` | receipts for the user's messages (``ReceiptPayload``) |
/// | `{prefix}/u/{user}/signal` | for the user's online devices, QoS 0: typing states (``TypingPayload``), presence probes and answers (``PresenceProbePayload``, ``PresenceAnswerPayload``) |
/// | `{prefix}/g/{group}/members/{user}` | retained: `user` is a member of `group` (``GroupMemberPayload``) |
/// | `{prefix}/{space}/...` | clients' generic pub/sub |
/// | `{prefix}/$gateway/{id}/stats` | the gateway's counters (``StatsPayload``) |
///
/// User and device ids passed in must be valid (``IMIdentifier/validate(_:kind:)``), so each is
/// exactly one topic level. Client topics are checked by ``pubsubTopic(_:)`` and
/// ``pubsubFilter(_:)``.
public struct GatewayTopics: Sendable, Hashable {
    /// The first level of every gateway topic, e.g. `im`.
    public let prefix: String
    /// The level below the prefix that holds the clients' generic topics, e.g. `t`.
    public let pubsubSpace: String
    /// `{prefix}/{space}/`: where the pub/sub space starts.
    public let pubsubRoot: String
    /// `{prefix}/u/`: where the per-user topics start.
    let userRoot: String

    /// The level below the prefix that holds the per-user topics.
    public static let userLevel = "u"
    /// The level below the prefix that holds the groups' topics.
    public static let groupLevel = "g"
    /// The level below the prefix that holds gateway-internal topics.
    public static let gatewayLevel = "$gateway"
    /// The first level of MQTT client ids the gateway uses.
    public static let clientIDPrefix = "imgw"

    /// Creates the topic scheme. Both arguments must be valid topic levels
    /// (``invalidLevelReason(_:)`` returns `nil`) and `pubsubSpace` must not be `u`;
    /// ``GatewayConfiguration/validate()`` checks both.
    public init(prefix: String = "im", pubsubSpace: String = "t") {
        assert(Self.invalidLevelReason(prefix) == nil, "invalid topic prefix \(prefix)")
        assert(Self.invalidLevelReason(pubsubSpace) == nil && pubsubSpace != Self.userLevel && pubsubSpace != Self.groupLevel, "invalid space")
        self.prefix = prefix
        self.pubsubSpace = pubsubSpace
        self.pubsubRoot = "\(prefix)/\(pubsubSpace)/"
        self.userRoot = "\(prefix)/\(Self.userLevel)/"
    }

    /// Why `level` cannot be the topic prefix or pub/sub space, or `nil` if it can: it must be
    /// one non-empty topic level without `/`, `+`, `#`, `$` or control characters.
    public static func invalidLevelReason(_ level: String) -> String? {
        if level.isEmpty { return "is empty" }
        if let bad = level.unicodeScalars.first(where: IMIdentifier.isForbidden) {
            return "contains \(bad.escaped(asASCII: true).debugDescription) (one topic level without / + # $ or control characters)"
        }
        return nil
    }

    // MARK: Per-user topics

    /// `{prefix}/u/{user}/inbox`: chat messages for `user`; each of the user's devices subscribes.
    public func inbox(user: String) -> String { self.userTopic(user, "inbox") }

    /// `{prefix}/u/{user}/revoked`: retained, the time before which the user's tokens are
    /// refused (the server API's revoke).
    public func revoked(user: String) -> String { self.userTopic(user, "revoked") }

    /// `{prefix}/u/+/revoked`: every user's revocation, which every gateway follows.
    public var revokedFilter: String { "\(self.prefix)/u/+/revoked" }

    /// `{prefix}/$ctl/disconnect`: the backend's disconnects, which every gateway follows.
    public var disconnectTopic: String { "\(self.prefix)/$ctl/disconnect" }

    /// `{prefix}/u/{user}/presence/{device}`: retained online/offline state of one device.
    public func presence(user: String, device: String) -> String {
        assert(IMIdentifier.isValid(device), "invalid device id")
        return self.userTopic(user, "presence/\(device)")
    }

    /// `{prefix}/u/{user}/presence/+`: the presence of every device of `user` (PRESENCE_WATCH).
    public func presenceFilter(user: String) -> String { self.userTopic(user, "presence/+") }

    /// `{prefix}/$ctl/marker/{client}`: where one of the gateway's own MQTT clients
    /// publishes a marker to itself (it comes back after the retained messages of the
    /// subscriptions made before it); `/` in the client id becomes `_`.
    package func marker(clientID: String) -> String {
        "\(self.prefix)/$ctl/marker/\(clientID.replacingOccurrences(of: "/", with: "_"))"
    }

    /// `{prefix}/u/+/presence/+`: the presence of every device of every user.
    public var everyPresenceFilter: String { "\(self.prefix)/u/+/presence/+" }

    /// `{prefix}/u/{user}/location`: the user's location stream; the last fix is retained.
    public func location(user: String) -> String { self.userTopic(user, "location") }

    /// `{prefix}/u/{user}/signal`: typing states, presence probes and their answers for
    /// `user`'s online devices (QoS 0).
    public func signal(user: String) -> String { self.userTopic(user, "signal") }

    /// `{prefix}/g/{group}/members/{user}`: retained while `user` is a member of `group`.
    public func groupMember(group: String, user: String) -> String {
        assert(IMIdentifier.isValid(group) && IMIdentifier.isValid(user), "invalid id")
        return "\(self.prefix)/\(Self.groupLevel)/\(group)/members/\(user)"
    }

    /// `{prefix}/g/{group}/members/+`: every member of `group`.
    public func groupMembersFilter(group: String) -> String {
        assert(IMIdentifier.isValid(group), "invalid group id")
        return "\(self.prefix)/\(Self.groupLevel)/\(group)/members/+"
    }

    /// `{prefix}/u/{user}/receipts`: delivered and read receipts for messages `user` sent.
    public func receipts(user: String) -> String { self.userTopic(user, "receipts") }

    /// `{prefix}/$gateway/{id}/stats`: the gateway's periodic counters.
    public func stats(gatewayID: String) -> String { "\(self.prefix)/\(Self.gatewayLevel)/\(gatewayID)/stats" }

    private func userTopic(_ user: String, _ rest: String) -> String {
        assert(IMIdentifier.isValid(user), "invalid user id")
        return "\(self.prefix)/\(Self.userLevel)/\(user)/\(rest)"
    }

    // MARK: MQTT client ids

    /// `imgw/{user}/{device}`: the MQTT client id of one device's persistent session.
    /// Both ids are valid identifiers, so `/` separates them unambiguously.
    public func mqttClientID(user: String, device: String) -> String {
        assert(IMIdentifier.isValid(user) && IMIdentifier.isValid(device), "invalid id")
        return "\(Self.clientIDPrefix)/\(user)/\(device)"
    }

    /// `imgw-{role}/{gatewayID}/{random number}`: the MQTT client id of one of the gateway's own
    /// clients (`ctl`, `push`, `shares`, `stats`). The random part keeps two gateways given the
    /// same `gateway_id` (or a restarted one whose old connection lingers) from taking each
    /// other's session over.
    public static func gatewayClientID(_ role: String, gatewayID: String) -> String {
        "\(clientIDPrefix)-\(role)/\(gatewayID)/\(UInt32.random(in: 0...UInt32.max))"
    }
}
