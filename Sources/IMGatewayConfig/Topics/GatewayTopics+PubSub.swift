import IMWire

extension GatewayTopics {
    /// The MQTT topic for a client's PUBLISH topic.
    ///
    /// Clients name topics in full, inside the space (docs/PROTOCOL.md 6.8: `im/t/room-1/chat`),
    /// so the MQTT topic is the client's topic once checked: 1–1024 bytes, inside
    /// `{prefix}/{space}/` with at least one character after it, no wildcards, no `$`, no
    /// control characters.
    public func pubsubTopic(_ clientTopic: String) throws(TopicError) -> String {
        try self.check(clientTopic, isFilter: false)
        return clientTopic
    }

    /// The MQTT filter for a client's SUBSCRIBE or UNSUBSCRIBE filter: like ``pubsubTopic(_:)``
    /// but `+` (a whole level) and `#` (the whole last level) are allowed after the space, so a
    /// filter can never reach outside it (`im/+/...` and `im/#` are refused).
    public func pubsubFilter(_ clientFilter: String) throws(TopicError) -> String {
        try self.check(clientFilter, isFilter: true)
        return clientFilter
    }

    /// The topic to show a client for an MQTT topic in the pub/sub space, or `nil` for a topic
    /// outside it (which must not reach a client as PUBLISH).
    public func clientTopic(fromPubsub mqttTopic: String) -> String? {
        guard self.isInsideSpace(mqttTopic) else { return nil }
        return mqttTopic
    }

    private func check(_ topic: String, isFilter: Bool) throws(TopicError) {
        let length = topic.utf8.count
        guard length > 0 else { throw .empty }
        guard length <= IMWire.topicLength.upperBound else { throw .tooLong(topic, length: length) }
        if let bad = topic.unicodeScalars.first(where: { $0 == "$" || IMIdentifier.isRefusedByBrokers($0) }) {
            throw .forbiddenCharacter(topic, bad)
        }
        guard self.isInsideSpace(topic) else { throw .outsideSpace(topic, space: self.pubsubRoot) }
        let levels = Self.levels(of: topic).dropFirst(2)
        for (index, level) in zip(levels.indices, levels) where level.utf8.contains(where: Self.isWildcard) {
            guard isFilter else { throw .wildcardInTopic(topic) }
            let wholeLevel = level == "+" || (level == "#" && index == levels.endIndex - 1)
            guard wholeLevel else { throw .misplacedWildcard(topic) }
        }
    }
}

extension GatewayTopics {
    /// Whether `topic` starts with `{prefix}/{space}/` (byte-wise, as MQTT compares) and has more after it.
    func isInsideSpace(_ topic: String) -> Bool {
        let root = self.pubsubRoot.utf8
        return topic.utf8.count > root.count && topic.utf8.starts(with: root)
    }

    static func isWildcard(_ byte: UInt8) -> Bool { byte == UInt8(ascii: "+") || byte == UInt8(ascii: "#") }

    /// The levels of a topic, split at every `/` byte (empty levels included), as MQTT splits them.
    static func levels(of topic: String) -> [String] {
        topic.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
            .map { String(decoding: $0, as: UTF8.self) }
    }
}
