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

    /// Creates a LOGIN.
    public init(token: String, deviceID: String? = nil) {
        self.token = token
        self.deviceID = deviceID
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.token = try fields.string(.authToken, length: IMWire.tokenLength)
        self.deviceID = try fields.optionalIdentifier(.deviceID)
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.authToken, string: self.token)
        if let deviceID { writer.write(.deviceID, string: deviceID) }
    }
}
