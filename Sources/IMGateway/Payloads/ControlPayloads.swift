/// A disconnect the app's backend asked for (server API), on `{prefix}/$ctl/disconnect`:
/// every gateway ends the named sessions it holds with KICK DISCONNECTED, those that logged in
/// before the request was made (`at`).
///
/// ```json
/// {"at":1735689600123,"device":"phone","reason":"account suspended","user":"bob"}
/// ```
public struct DisconnectPayload: Codable, Hashable, Sendable {
    /// Whose sessions end.
    public var user: String
    /// Only this device's session; all of the user's without it.
    public var device: String?
    /// Why, for the KICK's message.
    public var reason: String
    /// When the backend asked (Unix milliseconds, the asking gateway's clock): a session that
    /// logged in later is not ended, however late a gateway gets the request. Without it (an
    /// older gateway's request), every session named is.
    public var at: UInt64?

    /// Creates a disconnect.
    public init(user: String, device: String? = nil, reason: String, at: UInt64? = nil) {
        self.user = user
        self.device = device
        self.reason = reason
        self.at = at
    }

    /// Whether it ends a session (of the user and device it names) that registered at
    /// `registeredAt` (Unix milliseconds): one that was there when it was asked for. Gateways'
    /// clocks are taken to be in step (NTP); a login within their difference of the request
    /// may go either way.
    public func ends(sessionRegisteredAt registeredAt: UInt64) -> Bool {
        at.map { registeredAt <= $0 } ?? true
    }
}

/// The retained revocation of a user's tokens on `{prefix}/u/{user}/revoked`: tokens issued
/// before `before` (Unix seconds) are refused at LOGIN and TOKEN_REFRESH by every gateway.
///
/// ```json
/// {"before":1735689600,"reason":"stolen token","user":"bob"}
/// ```
public struct RevocationPayload: Codable, Hashable, Sendable {
    /// Tokens issued before this (Unix seconds) are refused.
    public var before: Int64
    /// Why, for the KICK of a session that logged in with such a token.
    public var reason: String?
    /// Whose tokens.
    public var user: String

    /// Creates a revocation.
    public init(before: Int64, reason: String? = nil, user: String) {
        self.before = before
        self.reason = reason
        self.user = user
    }
}
