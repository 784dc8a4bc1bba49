/// TOKEN_REFRESH (CONTROL, op 0x0015), client to gateway: replace the session's token with a
/// newer one, without logging in again.
///
/// Answered by an ``Ack``: positive with the new token's expiry (``Ack/tokenExpiry``), from
/// then on the session ends at that expiry instead of the old one; or negative (AUTH_FAILED,
/// TOKEN_EXPIRED, FORBIDDEN, BAD_REQUEST, NOT_LOGGED_IN), and the session goes on until the
/// current token expires. Either way the connection stays open. Always written with its
/// operation item: a CONTROL frame with AUTH_TOKEN and no OP is a ``LoginRequest``.
public struct TokenRefresh: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .tokenRefresh }

    /// The new HS256 JWT, for the session's user (and device, if the token names one).
    public var token: String

    /// Creates a TOKEN_REFRESH.
    public init(token: String) {
        self.token = token
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.token = try fields.string(.authToken, length: IMWire.tokenLength)
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.authToken, string: self.token)
    }
}
