/// Whether a WebSocket upgrade request may become a device connection (`listen.websocket`), and
/// if not, the HTTP answer that says why: a pure policy, tested without sockets.
///
/// - The path must be `listen.websocket.path` (404 otherwise).
/// - A browser's `Origin` must be the listener's own (the `Host` it was asked under, with the
///   listener's scheme) or one of `allowed_origins`, or those must hold `*` (403 otherwise). A
///   request without `Origin` comes from no browser page, and a page is what an origin check
///   protects against: it is allowed, and its token decides.
/// - The client must offer the subprotocol `imgw.tlv.v1` (400 otherwise): a client that
///   does not name it may speak something else.
struct WebSocketUpgradePolicy: Sendable {
    let path: String
    /// The allowed origins, normalized (``normalizedOrigin(_:)``).
    let allowedOrigins: Set<String>
    let anyOrigin: Bool
    /// Whether the listener serves TLS (its own origin is `https://`).
    let tls: Bool

    init(settings: GatewayConfiguration.WebSocketSettings, tls: Bool) {
        self.path = settings.path
        self.anyOrigin = settings.allowedOrigins.contains("*")
        self.allowedOrigins = Set(settings.allowedOrigins.compactMap(Self.normalizedOrigin))
        self.tls = tls
    }

    /// What the request asks for.
    struct Request: Sendable {
        /// The request target (a query, if any, is ignored).
        var target: String
        /// `Origin`, if sent.
        var origin: String?
        /// `Host`, if sent.
        var host: String?
        /// Every `Sec-WebSocket-Protocol` value, as sent (comma-separated lists).
        var protocols: [String]
    }

    enum Decision: Equatable, Sendable {
        /// Upgrade, answering with this subprotocol.
        case accept(subprotocol: String)
        /// Answer with this HTTP status, an error code and a message (JSON, as the server API's
        /// errors), then close.
        case refuse(status: Int, code: String, message: String)
    }

    func decide(_ request: Request) -> Decision {
        let path = request.target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
        guard path == self.path else {
            return .refuse(status: 404, code: "not_found", message: "no WebSocket endpoint at \(path): devices connect on \(self.path)")
        }
        if let origin = request.origin, !isAllowed(origin: origin, host: request.host) {
            return .refuse(status: 403, code: "origin_not_allowed", message: "pages from \(origin) may not connect (listen.websocket.allowed_origins)")
        }
        let offered = request.protocols.flatMap { $0.split(separator: ",") }.map { $0.trimmingSpaces() }
        let ours = GatewayConfiguration.WebSocketSettings.subprotocol
        guard offered.contains(ours) else {
            let what = offered.isEmpty ? "no subprotocol was offered" : "the subprotocols offered (\(offered.joined(separator: ", "))) do not include it"
            return .refuse(status: 400, code: "subprotocol_required", message: "the WebSocket subprotocol is \(ours): \(what)")
        }
        return .accept(subprotocol: ours)
    }

    private func isAllowed(origin: String, host: String?) -> Bool {
        if anyOrigin { return true }
        guard let normalized = Self.normalizedOrigin(origin) else { return false }
        if allowedOrigins.contains(normalized) { return true }
        guard let host, let own = Self.normalizedOrigin((tls ? "https://" : "http://") + host) else { return false }
        return normalized == own
    }

    /// `scheme://host[:port]` in lower case, without the scheme's default port, or nil if
    /// `origin` is not one (a path, a query, user info or another scheme than http, https).
    static func normalizedOrigin(_ origin: String) -> String? {
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
}

extension Substring {
    fileprivate func trimmingSpaces() -> String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
