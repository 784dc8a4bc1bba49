/// Whether a WebSocket upgrade request may become a device connection (`listen.websocket`), and
/// if not, the HTTP answer that says why: a pure policy, tested without sockets.
///
/// - The path must be `listen.websocket.path` (404 otherwise).
/// - In development (`listen.websocket.development`, which mints tokens for any user at
///   `/dev/token`), the request's `Host` must be a loopback name or address (`localhost`,
///   `*.localhost`, `127.0.0.0/8`, `::1`), whatever the path (403 otherwise): a page whose own
///   name resolves to 127.0.0.1 (DNS rebinding) is its own origin, and must not reach a gateway
///   that trusts whoever asks.
/// - A browser's `Origin` must be the listener's own (the scheme the listener serves with the
///   `Host` the request was sent to: `http://localhost:6980`) or one of `allowed_origins`, or
///   those must hold `*` (403 otherwise). A request without `Origin` comes from no browser
///   page, and a page is what an origin check protects against: it is allowed, and its token
///   decides.
/// - The client must offer the subprotocol `imgw.tlv.v1` (400 otherwise): a client that
///   does not name it may speak something else.
struct WebSocketUpgradePolicy: Sendable {
    let path: String
    /// The allowed origins, normalized (``normalizedOrigin(_:)``).
    let allowedOrigins: Set<String>
    let anyOrigin: Bool
    /// Whether the listener serves TLS (its own origin is `https://`).
    let tls: Bool
    /// Development mode: only loopback hosts (``isLoopback(host:)``).
    let development: Bool

    init(settings: GatewayConfiguration.WebSocketSettings, tls: Bool) {
        self.path = settings.path
        self.anyOrigin = settings.allowedOrigins.contains("*")
        self.allowedOrigins = Set(settings.allowedOrigins.compactMap(Self.normalizedOrigin))
        self.tls = tls
        self.development = settings.development
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
        if let refusal = refuseHost(request.host) { return refusal }
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

    /// In development, a refusal for a `Host` that is not a loopback name or address (or is
    /// missing); `nil` otherwise.
    func refuseHost(_ host: String?) -> Decision? {
        guard development, !(host.map(Self.isLoopback(host:)) ?? false) else { return nil }
        return .refuse(
            status: 403, code: "host_not_allowed",
            message: "in development mode this listener answers only requests to a loopback host (localhost, 127.0.0.1, [::1]), not \(host ?? "none")")
    }

    /// Whether `host` (a `Host` header: a name or address, with or without a port) names this
    /// machine's loopback interface: `localhost` and its subdomains (which browsers resolve to
    /// loopback themselves), an IPv4 address in 127.0.0.0/8, or `[::1]`.
    static func isLoopback(host: String) -> Bool {
        var name = Substring(host.lowercased())
        if name.hasPrefix("[") {
            guard let close = name.firstIndex(of: "]") else { return false }
            let rest = name[name.index(after: close)...]
            guard rest.isEmpty || (rest.hasPrefix(":") && Self.isPort(rest.dropFirst())) else { return false }
            let address = name[name.index(after: name.startIndex)..<close]
            return address == "::1" || address == "0:0:0:0:0:0:0:1"
        }
        if let colon = name.lastIndex(of: ":") {
            guard Self.isPort(name[name.index(after: colon)...]) else { return false }
            name = name[..<colon]
        }
        if name.hasSuffix(".") { name = name.dropLast() }
        if name == "localhost" || name.hasSuffix(".localhost") {
            return !name.contains { !($0.isLetter || $0.isNumber || $0 == "-" || $0 == ".") } && !name.contains("..")
        }
        let octets = name.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4, octets.allSatisfy({ !$0.isEmpty && $0.count <= 3 && $0.allSatisfy(\.isASCII) && UInt8($0) != nil }) else { return false }
        return octets[0] == "127"
    }

    private static func isPort(_ digits: Substring) -> Bool {
        !digits.isEmpty && digits.allSatisfy { $0.isASCII && $0.isNumber } && UInt16(digits) != nil
    }

    private func isAllowed(origin: String, host: String?) -> Bool {
        if anyOrigin { return true }
        guard let normalized = Self.normalizedOrigin(origin) else { return false }
        if allowedOrigins.contains(normalized) { return true }
        guard let host, let own = Self.normalizedOrigin((tls ? "https://" : "http://") + host) else { return false }
        return normalized == own
    }

    /// `scheme://host[:port]` in lower case, without the scheme's default port, or nil if
    /// `origin` is not one (``GatewayConfiguration/WebSocketSettings/normalizedOrigin(_:)``).
    static func normalizedOrigin(_ origin: String) -> String? {
        GatewayConfiguration.WebSocketSettings.normalizedOrigin(origin)
    }
}

extension Substring {
    fileprivate func trimmingSpaces() -> String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
