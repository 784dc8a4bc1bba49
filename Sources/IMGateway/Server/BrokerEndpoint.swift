import Mosquitto

/// Where the gateway's MQTT sessions connect, and how.
public struct BrokerEndpoint: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var username: String?
    public var password: String?
    /// TLS to the broker (`mqtts://`), with an optional CA and client certificate.
    public var tls: TLS?

    public struct TLS: Sendable, Hashable {
        public var caFile: String?
        public var certFile: String?
        public var keyFile: String?
        public var insecure: Bool
        public init(caFile: String? = nil, certFile: String? = nil, keyFile: String? = nil, insecure: Bool = false) {
            self.caFile = caFile
            self.certFile = certFile
            self.keyFile = keyFile
            self.insecure = insecure
        }
    }

    public init(host: String, port: Int, username: String? = nil, password: String? = nil, tls: TLS? = nil) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.tls = tls
    }

    /// Parses `mqtt://host:port` or `mqtts://host:port` (port defaults 1883 / 8883).
    public init(url: String) throws(GatewayError) {
        let secure: Bool
        let rest: Substring
        if url.hasPrefix("mqtt://") {
            secure = false
            rest = url.dropFirst("mqtt://".count)
        } else if url.hasPrefix("mqtts://") {
            secure = true
            rest = url.dropFirst("mqtts://".count)
        } else {
            throw .invalidBrokerURL(url, "expected mqtt://HOST:PORT or mqtts://HOST:PORT")
        }
        let hostPort = rest.split(separator: "/", maxSplits: 1).first.map(String.init) ?? ""
        var host = hostPort
        var port = secure ? 8883 : 1883
        if let colon = hostPort.lastIndex(of: ":"), !hostPort.hasSuffix("]") {
            host = String(hostPort[..<colon])
            guard let parsed = Int(hostPort[hostPort.index(after: colon)...]), (1...65535).contains(parsed) else {
                throw .invalidBrokerURL(url, "bad port")
            }
            port = parsed
        }
        host = host.trimmingCharacters(in: ["[", "]"])
        guard !host.isEmpty else { throw .invalidBrokerURL(url, "no host") }
        self.init(host: host, port: port, tls: secure ? TLS() : nil)
    }

    public var description: String { "\(tls == nil ? "mqtt" : "mqtts")://\(host):\(port)" }

    /// A client configuration for this broker.
    func clientConfiguration(clientID: String) -> MosquittoClient.Configuration {
        var configuration = MosquittoClient.Configuration(clientID: clientID, host: host, port: port)
        configuration.username = username
        configuration.password = password
        if let tls {
            configuration.tls = .init(caFile: tls.caFile, certFile: tls.certFile, keyFile: tls.keyFile, insecure: tls.insecure)
        }
        return configuration
    }
}
