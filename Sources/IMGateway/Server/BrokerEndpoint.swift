import Mosquitto

/// Where the gateway's MQTT sessions connect, and how.
public struct BrokerEndpoint: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var username: String?
    public var password: String?
    /// TLS to the broker (`mqtts://`), with an optional CA and client certificate.
    public var tls: TLS?

    public typealias TLS = MosquittoClient.TLS

    public init(host: String, port: Int, username: String? = nil, password: String? = nil, tls: TLS? = nil) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.tls = tls
    }

    /// The broker of the configuration's `broker` section (`url`, credentials, TLS files),
    /// or nil when no URL is set (the embedded broker is used).
    public init?(settings: GatewayConfiguration.BrokerSettings) throws(GatewayConfigurationError) {
        guard let url = settings.url else { return nil }
        let parsed = try BrokerURL(parsing: url)
        var tls: TLS? = nil
        if parsed.tls {
            // libmosquitto needs a CA file or directory: the system's unless one is given.
            tls = TLS(
                caFile: settings.caFile, caPath: settings.caFile == nil ? "/etc/ssl/certs" : nil,
                certFile: settings.certFile, keyFile: settings.keyFile, insecure: settings.tlsInsecure)
        }
        self.init(host: parsed.host, port: parsed.port, username: settings.username, password: settings.password, tls: tls)
    }

    public var description: String { "\(tls == nil ? "mqtt" : "mqtts")://\(host):\(port)" }

    /// A client configuration for this broker.
    func clientConfiguration(clientID: String) -> MosquittoClient.Configuration {
        var configuration = MosquittoClient.Configuration(clientID: clientID, host: host, port: port)
        configuration.username = username
        configuration.password = password
        configuration.tls = tls
        return configuration
    }
}
