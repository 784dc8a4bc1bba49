/// Which new TLV connections the gateway takes: at most `maxPerAddress` open connections
/// from one source address, and at most `maxAwaitingLogin` connections that have not logged
/// in yet, over all addresses (0: no limit). A connection is counted from its accept until it
/// closes, and as awaiting login until LOGIN_OK. Logged-in devices never wait for anything
/// here: the limits only turn away new connections.
struct ConnectionAdmission: Sendable, Hashable {
    enum Decision: Sendable, Hashable {
        case admit
        /// Refused, and why (for the ERROR and the log).
        case refuse(String)
    }

    let maxPerAddress: Int
    let maxAwaitingLogin: Int
    private(set) var perAddress: [String: Int] = [:]
    private(set) var awaitingLogin = 0

    init(maxPerAddress: Int, maxAwaitingLogin: Int) {
        self.maxPerAddress = maxPerAddress
        self.maxAwaitingLogin = maxAwaitingLogin
    }

    /// A connection from `address` was accepted: counted if admitted.
    mutating func open(address: String) -> Decision {
        let open = perAddress[address, default: 0]
        if maxPerAddress > 0, open >= maxPerAddress {
            return .refuse("too many connections from \(address) (limits.max_connections_per_address \(maxPerAddress))")
        }
        if maxAwaitingLogin > 0, awaitingLogin >= maxAwaitingLogin {
            return .refuse("too many connections waiting for LOGIN (limits.max_connections_awaiting_login \(maxAwaitingLogin))")
        }
        perAddress[address] = open + 1
        awaitingLogin += 1
        return .admit
    }

    /// An admitted connection reached LOGIN_OK.
    mutating func loggedIn() {
        awaitingLogin = max(0, awaitingLogin - 1)
    }

    /// An admitted connection from `address` closed; `loggedIn`: it had reached LOGIN_OK.
    mutating func closed(address: String, loggedIn: Bool) {
        if !loggedIn { awaitingLogin = max(0, awaitingLogin - 1) }
        let open = perAddress[address, default: 0] - 1
        perAddress[address] = open > 0 ? open : nil
    }
}
