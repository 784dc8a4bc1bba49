import CMosquitto

/// The broker of a run: where it listens and, for a broker without anonymous clients
/// (ejabberd), the account every client of the run uses.
struct BrokerAddress: Sendable, CustomStringConvertible {
    var endpoint: HostPort
    var username: String?
    var password: String?

    var host: String { endpoint.host }
    var port: Int { endpoint.port }
    var description: String { endpoint.description + (username.map { " as \($0)" } ?? "") }

    /// Sets the account on a raw libmosquitto handle (before it connects).
    func authenticate(_ handle: OpaquePointer) {
        if let username { mosquitto_username_pw_set(handle, username, password) }
    }
}
