import IMWire

/// The retained presence of one device on `{prefix}/u/{user}/presence/{device}`.
///
/// ```json
/// {"device":"phone-1","gateway":"gw-1","status":"online","ts":1735689600123}
/// ```
/// The gateway publishes `online` after LOGIN_OK and `offline` at logout; the same `offline`
/// payload is the MQTT will, so the broker publishes it when the gateway dies (its `ts` is
/// then the time the will was set, i.e. the login).
public struct PresencePayload: Codable, Hashable, Sendable {
    /// Online or offline.
    public enum Status: String, Codable, Hashable, Sendable, CaseIterable {
        /// Logged in.
        case online
        /// Logged out or connection lost.
        case offline

        /// The IMWire status.
        public var wireStatus: PresenceNotice.Status {
            switch self {
            case .online: .online
            case .offline: .offline
            }
        }
    }

    /// Online or offline.
    public var status: Status
    /// The device id (also the last topic level).
    public var device: String
    /// When the status was set, Unix milliseconds.
    public var ts: UInt64
    /// The id of the gateway the device is (or was) connected to.
    public var gateway: String?

    /// Creates a presence payload.
    public init(status: Status, device: String, ts: UInt64, gateway: String? = nil) {
        self.status = status
        self.device = device
        self.ts = ts
        self.gateway = gateway
    }

    /// The PRESENCE notice for a watcher; `user` comes from the topic. Offline notices carry
    /// `ts` as LAST_SEEN.
    public func notice(user: String) throws(PayloadError) -> PresenceNotice {
        guard IMIdentifier.isValid(user) else { throw .invalidField("user", value: user) }
        guard IMIdentifier.isValid(self.device) else { throw .invalidField("device", value: self.device) }
        return PresenceNotice(
            user: user, device: self.device, status: self.status.wireStatus,
            lastSeen: self.status == .offline ? self.ts : nil)
    }
}
