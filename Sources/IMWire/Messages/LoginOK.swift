/// LOGIN_OK (CONTROL, op 0x0011), gateway to client: the login succeeded.
public struct LoginOK: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .loginOK }

    /// The user id taken from the token.
    public var userID: String
    /// The device id in use (the client's, or assigned).
    public var deviceID: String?
    /// Gateway time, Unix milliseconds.
    public var serverTime: UInt64?
    /// Seconds between heartbeats the gateway expects.
    public var heartbeatInterval: UInt16?
    /// When the token expires (its `exp` claim), Unix milliseconds: the gateway ends the
    /// session with KICK TOKEN_EXPIRED after it, unless a ``TokenRefresh`` was ACKed first.
    public var tokenExpiry: UInt64?
    /// The LOGIN's sequence.
    public var refSequence: UInt32?
    /// Whether the broker kept the device's session: `true`, what was queued while it was
    /// away follows; `false`, a new session, so whatever was queued before (if the device
    /// had a session) is gone. `nil` from a gateway that does not say.
    public var sessionResumed: Bool?
    /// From a gateway with a message archive: where it catches the device up from (every
    /// stored message after this position follows, with ARCHIVED), of which epoch.
    public var position: StreamPosition?
    /// How the device's position was taken (with ``position``).
    public var syncStatus: IMSyncStatus?

    /// Creates a LOGIN_OK.
    public init(
        userID: String,
        deviceID: String? = nil,
        serverTime: UInt64? = nil,
        heartbeatInterval: UInt16? = nil,
        tokenExpiry: UInt64? = nil,
        refSequence: UInt32? = nil,
        sessionResumed: Bool? = nil,
        position: StreamPosition? = nil,
        syncStatus: IMSyncStatus? = nil
    ) {
        self.userID = userID
        self.deviceID = deviceID
        self.serverTime = serverTime
        self.heartbeatInterval = heartbeatInterval
        self.tokenExpiry = tokenExpiry
        self.refSequence = refSequence
        self.sessionResumed = sessionResumed
        self.position = position
        self.syncStatus = syncStatus
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.userID = try fields.identifier(.userID)
        self.deviceID = try fields.optionalIdentifier(.deviceID)
        self.serverTime = try fields.optionalInteger(.serverTime)
        self.heartbeatInterval = try fields.optionalInteger(.heartbeatInterval)
        self.tokenExpiry = try fields.optionalInteger(.tokenExpiry)
        self.refSequence = try fields.optionalInteger(.refSequence)
        self.sessionResumed = try fields.optionalFlag(.sessionResumed)
        self.position = try StreamPosition.read(fields)
        self.syncStatus = try fields.optionalInteger(.syncStatus, as: UInt8.self).map(IMSyncStatus.init(rawValue:))
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.userID, string: self.userID)
        if let deviceID { writer.write(.deviceID, string: deviceID) }
        if let serverTime { writer.write(.serverTime, integer: serverTime) }
        if let heartbeatInterval { writer.write(.heartbeatInterval, integer: heartbeatInterval) }
        if let tokenExpiry { writer.write(.tokenExpiry, integer: tokenExpiry) }
        if let refSequence { writer.write(.refSequence, integer: refSequence) }
        if let sessionResumed { writer.write(.sessionResumed, flag: sessionResumed) }
        position?.write(to: &writer)
        if let syncStatus { writer.write(.syncStatus, integer: syncStatus.rawValue) }
    }
}
