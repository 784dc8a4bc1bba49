extension IMWireError {
    /// The protocol error code reported for this error (ERROR frame or negative ACK).
    public var errorCode: IMErrorCode {
        switch self {
        case .badMagic: .badMagic
        case .unsupportedVersion: .unsupportedVersion
        case .unknownFrameType: .unknownFrameType
        case .unsupportedEncryption: .unsupportedEncryption
        case .unsupportedCompression: .unsupportedCompression
        case .bodyTooLarge, .decompressedBodyTooLarge: .bodyTooLarge
        case .invalidBodyLength, .malformedTLV, .truncatedFrame: .malformedFrame
        case .badChecksum: .badChecksum
        case .decompressionFailed: .decompressionFailed
        case .unknownOperation: .unknownOperation
        case .unexpectedFrameType, .unexpectedOperation, .missingField, .missingContent: .badRequest
        case .invalidField(let tag, _) where [.userID, .deviceID, .to, .from].contains(tag): .invalidUserID
        // A group id that is not one; GROUP beside TO is a request that is not one.
        case .invalidField(.group, .invalidIdentifier), .invalidField(.group, .invalidUTF8), .invalidField(.group, .lengthOutOfRange): .invalidUserID
        case .invalidField(.qos, .valueOutOfRange): .qosNotSupported
        case .invalidField: .badRequest
        case .compressionFailed: .internalError
        }
    }

    /// The CONTROL ERROR frame reporting this error: ERROR_CODE, ERROR_MESSAGE and, when the
    /// offending frame's header could be read, REF_SEQUENCE.
    /// - Parameters:
    ///   - sequence: The sender's next sequence number.
    ///   - timestamp: Unix seconds at the sender.
    ///   - sessionID: The offending frame's session id, or 0 if unknown.
    ///   - inReplyTo: The offending frame's sequence, if known.
    public func errorFrame(sequence: UInt32, timestamp: UInt32, sessionID: UInt16 = 0, inReplyTo: UInt32? = nil)
        -> IMFrame
    {
        ErrorNotice(self, refSequence: inReplyTo).frame(sequence: sequence, timestamp: timestamp, sessionID: sessionID)
    }
}
