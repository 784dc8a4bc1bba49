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
        /// `{prefix}/u/{user}/signal`.
        case signal(user: String)
        /// `{prefix}/g/{group}/members/{user}`.
        case groupMember(group: String, user: String)
        /// A topic in the pub/sub space; `clientTopic` is what the client is shown.
        case pubsub(clientTopic: String)
    }

    /// Classifies an MQTT topic, or `nil` for a topic that is none of ``Kind`` (another prefix,
    /// the stats topic, an invalid user or device level, a wrong number of levels).
    public func classify(_ mqttTopic: String) -> Kind? {
        if let clientTopic = self.clientTopic(fromPubsub: mqttTopic) { return .pubsub(clientTopic: clientTopic) }
        // `{prefix}/u/{user}/{kind}[/{device}]`, read in place: this runs for every message.
        let topic = mqttTopic.utf8
        let root = self.userRoot.utf8
        guard topic.starts(with: root) else { return self.classifyGroupTopic(mqttTopic) }
        let rest = topic[topic.index(topic.startIndex, offsetBy: root.count)...]
        guard let slash = rest.firstIndex(of: UInt8(ascii: "/")) else { return nil }
        let user = String(Substring(rest[..<slash]))
        guard IMIdentifier.isValid(user) else { return nil }
        let tail = rest[rest.index(after: slash)...]
        if tail.elementsEqual("inbox".utf8) { return .inbox(user: user) }
        if tail.elementsEqual("location".utf8) { return .location(user: user) }
        if tail.elementsEqual("receipts".utf8) { return .receipts(user: user) }
        if tail.elementsEqual("signal".utf8) { return .signal(user: user) }
        let presence = "presence/".utf8
        guard tail.starts(with: presence) else { return nil }
        let device = tail[tail.index(tail.startIndex, offsetBy: presence.count)...]
        guard !device.contains(UInt8(ascii: "/")) else { return nil }
        let name = String(Substring(device))
        return IMIdentifier.isValid(name) ? .presence(user: user, device: name) : nil
    }

    /// `{prefix}/g/{group}/members/{user}`, or `nil`.
    private func classifyGroupTopic(_ mqttTopic: String) -> Kind? {
        let levels = mqttTopic.split(separator: "/", omittingEmptySubsequences: false)
        guard levels.count == 5, levels[0] == self.prefix, levels[1] == Self.groupLevel, levels[3] == "members" else { return nil }
        let group = String(levels[2]), user = String(levels[4])
        guard IMIdentifier.isValid(group), IMIdentifier.isValid(user) else { return nil }
        return .groupMember(group: group, user: user)
    }
}
