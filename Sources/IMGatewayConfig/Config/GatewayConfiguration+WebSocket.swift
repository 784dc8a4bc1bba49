import IMWire
extension GatewayConfiguration {
    /// `listen.websocket`: TLV clients over WebSocket, for browsers (docs/PROTOCOL.md 1.1): the
    /// same frames as over TCP, in binary messages, with the subprotocol
    /// ``WebSocketSettings/subprotocol``. Off by default.
    public struct WebSocketSettings: Codable, Sendable, Hashable {
        /// The subprotocol a client must offer (`Sec-WebSocket-Protocol`).
        public static let subprotocol = IMWire.webSocketSubprotocol

        /// `enabled`: whether to serve it. Default false.
        public var enabled: Bool
        /// `host`: the address to bind. Default `127.0.0.1`.
        public var host: String
        /// `port`: the TCP port; 0 picks a free one. Default 6980.
        public var port: Int
        /// `path`: the path a client upgrades on. Default `/im`.
        public var path: String
        /// `allowed_origins`: the origins (`scheme://host[:port]`) whose pages may connect, besides
        /// the listener's own; `*` allows any. A request without `Origin` (not a browser) is
        /// allowed: the token decides. Default none.
        public var allowedOrigins: [String]
        /// `development`: also serve the web chat page (`/`) and development tokens
        /// (`/dev/token?user=USER`), minted with `auth.jwt_secret` for anyone who asks. For a
        /// developer's machine: only on a loopback `host`. Default false.
        public var development: Bool

        /// Creates WebSocket settings with the defaults (off).
        public init(
            enabled: Bool = false, host: String = "127.0.0.1", port: Int = 6980, path: String = "/im", allowedOrigins: [String] = [],
            development: Bool = false
        ) {
            self.enabled = enabled
            self.host = host
            self.port = port
            self.path = path
            self.allowedOrigins = allowedOrigins
            self.development = development
        }

        enum CodingKeys: String, CodingKey, CaseIterable {
            case enabled, host, port, path, development
            case allowedOrigins = "allowed_origins"
        }

        public init(from decoder: any Decoder) throws {
            try decoder.rejectUnknownKeys(CodingKeys.self)
            let c = try decoder.container(keyedBy: CodingKeys.self)
            let d = Self()
            self.enabled = try c.value(.enabled, or: d.enabled)
            self.host = try c.value(.host, or: d.host)
            self.port = try c.value(.port, or: d.port)
            self.path = try c.value(.path, or: d.path)
            self.allowedOrigins = try c.value(.allowedOrigins, or: d.allowedOrigins)
            self.development = try c.value(.development, or: d.development)
        }

        /// The paths of the pages the listener serves beside its upgrade path.
        package static let pagePaths: Set<String> = ["/", "/imclient.js", "/chat.html", "/chat.js", "/chat.css", "/dev/token"]

        /// `scheme://host[:port]` in lower case, without the scheme's default port, or nil if
        /// `origin` is not one (a path, a query, user info or another scheme than http, https).
        package static func normalizedOrigin(_ origin: String) -> String? {
            let lower = origin.lowercased()
            let scheme: String
            let defaultPort: String
            if lower.hasPrefix("http://") {
                (scheme, defaultPort) = ("http", "80")
            } else if lower.hasPrefix("https://") {
                (scheme, defaultPort) = ("https", "443")
            } else {
                return nil
            }
            var authority = Substring(lower.dropFirst(scheme.count + 3))
            if authority.hasSuffix("/") { authority = authority.dropLast() }
            guard !authority.isEmpty, !authority.contains(where: { "/?#@ ".contains($0) }) else { return nil }
            // The port: after the last colon, unless that colon is inside an IPv6 literal.
            var host = authority
            var port: Substring?
            if let colon = authority.lastIndex(of: ":"), !authority[colon...].contains("]") {
                host = authority[..<colon]
                port = authority[authority.index(after: colon)...]
                guard let digits = port, !digits.isEmpty, digits.allSatisfy(\.isASCII), UInt16(digits) != nil else { return nil }
            }
            guard !host.isEmpty else { return nil }
            if let port, port != Substring(defaultPort) { return "\(scheme)://\(host):\(port)" }
            return "\(scheme)://\(host)"
        }

        /// The problems of these settings, each naming its key under `listen.websocket.`.
        func check(_ check: inout Checker) {
            guard enabled else { return }
            check.nonEmpty("listen.websocket.host", host)
            check.port("listen.websocket.port", port, allowZero: true)
            if !path.hasPrefix("/") || path.contains("?") || path.contains("#") || path.contains(" ") {
                check.fail("listen.websocket.path", path.debugDescription, "is not a path (one that starts with /, without a query)")
            } else if Self.pagePaths.contains(path) {
                check.fail("listen.websocket.path", path.debugDescription, "is a path of the pages the listener serves")
            }
            for origin in allowedOrigins where origin != "*" && Self.normalizedOrigin(origin) == nil {
                check.fail("listen.websocket.allowed_origins", origin.debugDescription, "is not an origin (scheme://host[:port]) or *")
            }
            if development && !GatewayConfiguration.isLoopback(host) {
                check.fail(
                    "listen.websocket.development", "true",
                    "is for a developer's machine (anyone who reaches the listener can log in as any user): only with a loopback listen.websocket.host, not \(host)")
            }
        }
    }
}
