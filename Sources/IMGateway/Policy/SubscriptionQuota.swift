/// How many pub/sub subscriptions and presence or location watches one device may hold
/// (`limits.max_subscriptions`, `limits.max_watches`), and which it holds.
///
/// A filter or user the device already has does not count again; what the broker refuses,
/// or the device gives up, is taken back. Past the limit a SUBSCRIBE's filter is refused
/// with LIMIT_REACHED (the others still granted, in request order), and a WATCH that would
/// pass it is refused whole: nothing reaches the broker, so a device cannot grow the
/// broker's memory past its limit.
struct SubscriptionQuota: Sendable, Hashable {
    enum WatchKind: Sendable, Hashable {
        case presence, location
    }

    let maxSubscriptions: Int
    let maxWatches: Int
    private(set) var filters: Set<String> = []
    private(set) var presence: Set<String> = []
    private(set) var location: Set<String> = []

    init(maxSubscriptions: Int, maxWatches: Int) {
        self.maxSubscriptions = maxSubscriptions
        self.maxWatches = maxWatches
    }

    /// Reserves what fits of `wanted` (in order); returns whether each one fits.
    mutating func admit(filters wanted: [String]) -> [Bool] {
        wanted.map { filter in
            if filters.contains(filter) { return true }
            guard filters.count < maxSubscriptions else { return false }
            filters.insert(filter)
            return true
        }
    }

    mutating func release(filters given: some Sequence<String>) {
        filters.subtract(given)
    }

    /// Reserves `users` for watches of `kind` if all fit (presence and location watches
    /// count together); returns whether they did.
    mutating func admit(watches users: [String], _ kind: WatchKind) -> Bool {
        let new = Set(users).subtracting(kind == .presence ? presence : location)
        guard presence.count + location.count + new.count <= maxWatches else { return false }
        if kind == .presence { presence.formUnion(new) } else { location.formUnion(new) }
        return true
    }

    mutating func release(watches users: some Sequence<String>, _ kind: WatchKind) {
        if kind == .presence { presence.subtract(users) } else { location.subtract(users) }
    }
}
