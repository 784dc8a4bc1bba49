import Synchronization

/// The gateway's ``ConnectionAdmission``, shared by its event loops; a ``Ticket`` per admitted
/// connection reports its login and its end, each once.
final class ConnectionAdmissions: Sendable {
    private let state: Mutex<ConnectionAdmission>

    init(_ limits: GatewayConfiguration.LimitSettings) {
        state = Mutex(ConnectionAdmission(maxPerAddress: limits.maxConnectionsPerAddress, maxAwaitingLogin: limits.maxConnectionsAwaitingLogin))
    }

    /// Admits a connection from `address`, or says why not.
    func open(address: String) -> Result<Ticket, Refusal> {
        switch state.withLock({ $0.open(address: address) }) {
        case .admit: .success(Ticket(admissions: self, address: address))
        case .refuse(let why): .failure(Refusal(reason: why))
        }
    }

    struct Refusal: Error, Sendable {
        var reason: String
    }

    /// What the gateway counts now (for tests and metrics).
    var current: ConnectionAdmission { state.withLock { $0 } }

    /// One admitted connection.
    final class Ticket: Sendable {
        private let admissions: ConnectionAdmissions
        private let address: String
        /// Reported so far: each once.
        private let reported = Mutex<(loggedIn: Bool, closed: Bool)>((false, false))

        fileprivate init(admissions: ConnectionAdmissions, address: String) {
            self.admissions = admissions
            self.address = address
        }

        /// The connection reached LOGIN_OK (counted once).
        func loggedIn() {
            let first = reported.withLock { reported in
                defer { reported.loggedIn = true }
                return !reported.closed && !reported.loggedIn
            }
            if first { admissions.state.withLock { $0.loggedIn() } }
        }

        /// The connection closed (counted once).
        func closed() {
            let (first, wasLoggedIn) = reported.withLock { reported in
                defer { reported.closed = true }
                return (!reported.closed, reported.loggedIn)
            }
            if first { admissions.state.withLock { $0.closed(address: address, loggedIn: wasLoggedIn) } }
        }

        /// A ticket nobody closed (its connection's handlers never installed) gives its place
        /// back when it goes: a leaked place would count against every later connection.
        deinit {
            closed()
        }
    }
}
