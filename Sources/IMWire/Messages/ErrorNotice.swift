/// ERROR (CONTROL, op 0x0014): an error report, in either direction.
///
/// Sent for framing errors (then the connection closes), for a refused LOGIN (then the
/// connection closes), and for errors not tied to one request. Errors of one request are
/// reported by a negative ``Ack`` instead.
public struct ErrorNotice: IMMessageBody {
    public static var frameType: IMFrameType { .control }
    public static var operation: IMOperation { .error }

    /// The error code.
    public var code: IMErrorCode
    /// Human-readable text.
    public var message: String?
    /// The sequence of the frame that caused the error, if it could be read.
    public var refSequence: UInt32?

    /// Creates an ERROR.
    public init(code: IMErrorCode, message: String? = nil, refSequence: UInt32? = nil) {
        self.code = code
        self.message = message
        self.refSequence = refSequence
    }

    /// The ERROR reporting `error`: its code and description.
    public init(_ error: IMWireError, refSequence: UInt32? = nil) {
        self.init(code: error.errorCode, message: error.description, refSequence: refSequence)
    }

    public init(fields: TLVFields) throws(IMWireError) {
        self.code = IMErrorCode(try fields.integer(.errorCode, as: UInt16.self))
        self.message = try fields.optionalString(.errorMessage)
        self.refSequence = try fields.optionalInteger(.refSequence)
    }

    public func write(to writer: inout TLVWriter) {
        writer.write(.errorCode, integer: self.code.rawValue)
        if let message { writer.write(.errorMessage, string: message) }
        if let refSequence { writer.write(.refSequence, integer: refSequence) }
    }
}
