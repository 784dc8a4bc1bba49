extension GatewayConfiguration {
    /// `groups`: group chat (docs/PROTOCOL.md 6.11). The app's backend sets the membership
    /// through the server API.
    public struct GroupSettings: Codable, Sendable, Hashable {
        /// `max_members`: the most members a group may have. Default 1,000.
        public var maxMembers: Int
        /// `cache`: the most groups a gateway follows (their membership kept up to date in
        /// memory); the one used least recently is let go first. Default 10,000.
        public var cache: Int

        /// Creates group settings with the defaults.
        public init(maxMembers: Int = 1000, cache: Int = 10_000) {
            self.maxMembers = maxMembers
            self.cache = cache
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case maxMembers = "max_members"
            case cache
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let d = Self()
            self.maxMembers = try c.value(.maxMembers, or: d.maxMembers)
            self.cache = try c.value(.cache, or: d.cache)
        }

        /// The problems of these settings, each naming its key under `groups.`.
        func check(_ check: inout Checker) {
            check.range("groups.max_members", maxMembers, 1...100_000)
            check.range("groups.cache", cache, 1...10_000_000)
        }
    }
}
