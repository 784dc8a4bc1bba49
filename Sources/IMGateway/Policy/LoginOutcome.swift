import IMWire

/// How a login ended (the login task's outcome, as mail to the connection).
enum LoginOutcome: Sendable {
    /// The token holds and the device's MQTT session is open.
    case opened(OpenedSession)
    /// Refused: ERROR with this code, then close.
    case refused(IMErrorCode, String)
    /// The MQTT session could not be opened (the session was ended again).
    case brokerFailed(String)
}

/// What a login that succeeded opened and found: the session for the connection's I/O, and what
/// LOGIN_OK and the start of the data path need.
struct OpenedSession: Sendable {
    /// The device's MQTT session.
    let session: any DeviceSession
    /// Its place in the gateway's ``SessionRegistry``.
    let registration: UInt64
    /// What the session's CONNACK made of the broker.
    let brokerFit: BrokerFit
    /// The broker kept the device's MQTT session (its subscriptions and queued messages).
    let resumed: Bool
    /// When the token expires, Unix milliseconds (LOGIN_OK's TOKEN_EXPIRY).
    let expiresAt: UInt64
    /// With the archive: where the device's catch-up starts (`nil` without an archive).
    let sync: LoginSync?
}

/// Where a login's catch-up starts, decided in the login task (``SyncStart``).
struct LoginSync: Sendable, Hashable {
    /// The device is here.
    var position: UInt64
    /// How it was decided.
    var status: IMSyncStatus
    /// The stream's end at login; `nil` when the archive could not be read (the catch-up is
    /// tried again once live).
    var last: UInt64?
    /// The position the archive had for the device.
    var saved: UInt64?
}

/// Why a token is not taken (at LOGIN or TOKEN_REFRESH): the code and text of the refusal.
struct LoginRefusal: Error, Sendable, Hashable {
    var code: IMErrorCode
    var message: String

    init(code: IMErrorCode, message: String) {
        self.code = code
        self.message = message
    }

    /// FORBIDDEN when a verified `token` is for another user than `user`, or bound to another
    /// device than `device`; AUTH_FAILED when the user's tokens issued before it was were
    /// revoked (LOGIN and TOKEN_REFRESH); `nil` when it is good for them.
    init?(token: AuthenticatedDevice, isNotFor user: String, _ device: String, revocations: TokenRevocations) {
        if token.userID != user {
            self.init(code: .forbidden, message: "the token is for user \(token.userID), not \(user)")
        } else if let bound = token.deviceID, bound != device {
            self.init(code: .forbidden, message: "the token is for device \(bound), not \(device)")
        } else if let revoked = revocations.refusal(of: token) {
            self.init(code: .authFailed, message: revoked)
        } else {
            return nil
        }
    }
}
