extension GatewayTopics {
    /// What an MQTT topic the gateway receives messages on is for.
    public enum Kind: Hashable, Sendable {
        /// `{prefix}/u/{user}/inbox`.
        case inbox(user: String)
        /// `{prefix}/u/{user}/presence/{device}`.
        case presence(user: String, device: String)
        /// `{prefix}/u/{user}/location`.
        case location(user: String)
        /// `{prefix}/u/{user}/receipts`.
        case receipts(user: String)
        /// A topic in the pub/sub space; `clientTopic` is what the client is shown.
        case pubsub(clientTopic: String)
    }

    /// Classifies an MQTT topic, or `nil` for a topic that is none of ``Kind`` (another prefix,
    /// the stats topic, an invalid user or device level, a wrong number of levels).
    public func classify(_ mqttTopic: String) -> Kind? {
        if let clientTopic = self.clientTopic(fromPubsub: mqttTopic) { return .pubsub(clientTopic: clientTopic) }
        let levels = Self.levels(of: mqttTopic)
        guard levels.count >= 4, levels[0] == self.prefix, levels[1] == Self.userLevel, IMIdentifier.isValid(levels[2])
        else { return nil }
        let user = levels[2]
        switch (levels.count, levels[3]) {
        case (4, "inbox"): return .inbox(user: user)
        case (4, "location"): return .location(user: user)
        case (4, "receipts"): return .receipts(user: user)
        case (5, "presence") where IMIdentifier.isValid(levels[4]): return .presence(user: user, device: levels[4])
        default: return nil
        }
    }
}
