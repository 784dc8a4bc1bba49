/// LOGIN (CONTROL, op 0x0010), client to gateway.
///
/// Answered by ``LoginOK``, or by an ``ErrorNotice`` (AUTH_FAILED, TOKEN_EXPIRED,
/// INVALID_USER_ID...) after which the gateway closes the connection.
public struct LoginRequest: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .login }

    /// The HS256 JWT; its `sub` claim is the user id.
    public var token: String
    /// The device id; the gateway assigns one if absent.
    public var deviceID: String?
    /// Whether the gateway sends this device RECEIPT_NOTICE frames (delivered and read
    /// notices of messages its user sent): `false` asks for none. `nil`: the item is absent,
    /// which means `true`.
    public var receiptNotices: Bool?
    /// Whether the gateway sends this device carbons (copies of the messages its user sends
    /// from other devices): `false` asks for none. `nil`: the item is absent, which means
    /// `true`.
    public var carbons: Bool?
    /// Where the device is in its user's stream of stored messages (STREAM_EPOCH and
    /// STREAM_OFFSET): it has everything up to there. `nil`: the gateway uses the position it
    /// kept for the device.
    public var position: StreamPosition?

    /// Creates a LOGIN.
    public init(
        token: String, deviceID: String? = nil, receiptNotices: Bool? = nil, carbons: Bool? = nil, position: StreamPosition? = nil
    ) {
        self.token = token
        self.deviceID = deviceID
        self.receiptNotices = receiptNotices
        self.carbons = carbons
        self.position = position
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.token = try fields.string(.authToken, length: IMWire.tokenLength)
        self.deviceID = try fields.optionalIdentifier(.deviceID)
        self.receiptNotices = try fields.optionalFlag(.receiptNotices)
        self.carbons = try fields.optionalFlag(.carbons)
        self.position = try StreamPosition.read(fields)
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.authToken, string: self.token)
        if let deviceID { writer.write(.deviceID, string: deviceID) }
        if let receiptNotices { writer.write(.receiptNotices, flag: receiptNotices) }
        if let carbons { writer.write(.carbons, flag: carbons) }
        position?.write(to: &writer)
    }
}
