import IMWire

/// What a login that succeeded found, for LOGIN_OK and the start of the data path
/// (``ConnectionAction/completeLogin(_:)``).
public struct LoginGrant: Sendable, Hashable {
    /// The broker kept the device's MQTT session (its subscriptions and queued messages).
    public var resumed: Bool
    /// When the token expires, in Unix milliseconds (LOGIN_OK's TOKEN_EXPIRY).
    public var tokenExpiry: UInt64
    /// LOGIN's CARBONS: whether the device takes carbons of what the user's other devices send.
    public var carbons: Bool
    /// With the archive: where the device's catch-up starts (`nil` without an archive).
    public var sync: LoginSync?
    /// The position LOGIN gave, for a start decided later.
    public var asked: StreamPosition?

    public init(resumed: Bool = false, tokenExpiry: UInt64 = 0, carbons: Bool = true, sync: LoginSync? = nil, asked: StreamPosition? = nil) {
        self.resumed = resumed
        self.tokenExpiry = tokenExpiry
        self.carbons = carbons
        self.sync = sync
        self.asked = asked
    }
}

/// Where a login's catch-up starts, decided in the login task (``SyncStart``).
public struct LoginSync: Sendable, Hashable {
    /// The device is here.
    public var position: UInt64
    /// How it was decided.
    public var status: IMSyncStatus
    /// The stream's end at login; `nil` when the archive could not be read (the catch-up is
    /// tried again once live).
    public var last: UInt64?
    /// The position the archive had for the device.
    public var saved: UInt64?

    public init(position: UInt64, status: IMSyncStatus, last: UInt64?, saved: UInt64?) {
        self.position = position
        self.status = status
        self.last = last
        self.saved = saved
    }
}
