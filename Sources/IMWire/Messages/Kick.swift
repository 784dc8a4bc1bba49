/// KICK (CONTROL, op 0x0013), gateway to client: the gateway closes the connection.
///
/// Reasons: SESSION_TAKEN_OVER, SERVER_SHUTTING_DOWN, IDLE_TIMEOUT, TOKEN_EXPIRED, FORBIDDEN.
/// After SESSION_TAKEN_OVER a client should not reconnect automatically.
public struct Kick: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .kick }

    /// Why the connection is closed.
    public var reason: IMErrorCode
    /// Human-readable text.
    public var message: String?

    /// Creates a KICK.
    public init(reason: IMErrorCode, message: String? = nil) {
        self.reason = reason
        self.message = message
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.reason = IMErrorCode(try fields.integer(.errorCode, as: UInt16.self))
        self.message = try fields.optionalString(.errorMessage)
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.errorCode, integer: self.reason.rawValue)
        if let message { writer.write(.errorMessage, string: message) }
    }
}
