/// A broker address parsed from `broker.url`: `mqtt://HOST[:PORT]` or `mqtts://HOST[:PORT]`.
///
/// The port defaults to 1883 (`mqtt`) or 8883 (`mqtts`); an IPv6 host is written in brackets
/// (`mqtt://[::1]:1883`). Credentials, paths and queries are refused: user name and password
/// have their own keys.
public struct BrokerURL: Sendable, Hashable, CustomStringConvertible {
    /// The host name or address (IPv6 without brackets).
    public var host: String
    /// The TCP port.
    public var port: Int
    /// Whether to connect with TLS (`mqtts`).
    public var tls: Bool

    /// Creates an address.
    public init(host: String, port: Int, tls: Bool) {
        self.host = host
        self.port = port
        self.tls = tls
    }

    /// Parses `url`; errors name the key `broker.url`.
    public init(parsing url: String) throws(GatewayConfigurationError) {
        func refuse(_ reason: String) -> GatewayConfigurationError {
            .invalidValue(key: "broker.url", value: url.debugDescription, reason: reason)
        }
        let lowered = url.lowercased()
        let tls: Bool
        let rest: Substring
        if lowered.hasPrefix("mqtt://") {
            (tls, rest) = (false, url.dropFirst("mqtt://".count))
        } else if lowered.hasPrefix("mqtts://") {
            (tls, rest) = (true, url.dropFirst("mqtts://".count))
        } else {
            throw refuse("is not mqtt://HOST[:PORT] or mqtts://HOST[:PORT]")
        }
        let authority = rest.hasSuffix("/") ? rest.dropLast() : rest
        if let bad = authority.first(where: { "/?#@ ".contains($0) }) {
            throw refuse("contains \(String(bad).debugDescription); only HOST[:PORT] may follow the scheme")
        }
        var host = authority
        var portText: Substring? = nil
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw refuse("has an unclosed [") }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw refuse("has text after ]") }
                portText = after.dropFirst()
            }
        } else if let colon = authority.firstIndex(of: ":") {
            host = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        }
        guard !host.isEmpty else { throw refuse("has no host") }
        var port = tls ? 8883 : 1883
        if let portText {
            guard let parsed = Int(portText), (1...65535).contains(parsed) else {
                throw refuse("has port \(String(portText).debugDescription), not 1-65535")
            }
            port = parsed
        }
        self.init(host: String(host), port: port, tls: tls)
    }

    /// The URL, e.g. `mqtts://broker.example:8883`.
    public var description: String {
        "\(self.tls ? "mqtts" : "mqtt")://\(self.host.contains(":") ? "[\(self.host)]" : self.host):\(self.port)"
    }
}
