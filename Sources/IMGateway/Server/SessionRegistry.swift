/// The connections logged in on this process, by user and device, for session takeover.
actor SessionRegistry {
    private var sessions: [String: Entry] = [:]

    struct Entry: Sendable {
        let id: UInt64
        /// When the token the device logged in with was issued (Unix seconds), if it says.
        let issuedAt: Int64?
        /// When it registered (Unix milliseconds).
        let registeredAt: UInt64
        /// Makes the connection end the way the reason says (a newer login of the device, the
        /// backend's disconnect): KICK, close, end the MQTT side; returns once it has.
        let end: @Sendable (ConnectionStateMachine.LeaveReason) async -> Void
    }

    private var nextID: UInt64 = 0

    /// Registers a new login; an older connection of the same device is told to leave
    /// first (it sends a KICK and closes) and awaited. Returns the registration id.
    func register(
        user: String, device: String, issuedAt: Int64?, end: @escaping @Sendable (ConnectionStateMachine.LeaveReason) async -> Void
    ) async -> UInt64 {
        nextID += 1
        let id = nextID
        let key = user + "/" + device
        let previous = sessions[key]
        sessions[key] = Entry(id: id, issuedAt: issuedAt, registeredAt: unixMilliseconds(), end: end)
        if let previous { await previous.end(.takenOver) }
        return id
    }

    /// Forgets a registration (if still current).
    func unregister(user: String, device: String, id: UInt64) {
        let key = user + "/" + device
        if sessions[key]?.id == id { sessions[key] = nil }
    }

    /// The sessions of `user` on this gateway (of `device` only, if given), with their device
    /// ids. Looks at every session: for the rare disconnects and revocations.
    func sessions(of user: String, device: String? = nil) -> [(device: String, entry: Entry)] {
        if let device { return sessions[user + "/" + device].map { [(device, $0)] } ?? [] }
        let prefix = user + "/"
        return sessions.compactMap { key, entry in key.hasPrefix(prefix) ? (String(key.dropFirst(prefix.count)), entry) : nil }
    }

    var count: Int { sessions.count }
}
