import NIOCore

/// ACK (type 2): acknowledges the frame whose sequence is in the header, or refuses it.
///
/// The body is empty for a plain ACK. A positive ACK may carry MESSAGE_ID and SERVER_TIME
/// (chat), TOKEN_EXPIRY (TOKEN_REFRESH), subscription results (SUBSCRIBE), STREAM_OFFSET,
/// STREAM_EPOCH and SYNC_STATUS (SYNC) or READ_THROUGH and UNREAD (READ_MARKER); a negative ACK
/// carries ERROR_CODE and optionally ERROR_MESSAGE. The seed client's form (a new sequence in
/// the header and a 4-byte body holding the acknowledged sequence) is accepted when decoding
/// and never sent.
public struct Ack: Hashable, Sendable {
    /// The acknowledged frame's sequence.
    public var sequence: UInt32
    /// The acknowledged chat message's id.
    public var messageID: String?
    /// When the gateway accepted the message, Unix milliseconds.
    public var serverTime: UInt64?
    /// When acknowledging a ``TokenRefresh``: the new token's expiry (its `exp` claim), Unix
    /// milliseconds.
    public var tokenExpiry: UInt64?
    /// Set for a negative ACK: why the frame was refused.
    public var error: IMErrorCode?
    /// Human-readable text for a negative ACK.
    public var errorMessage: String?
    /// With RATE_LIMITED: milliseconds to wait before sending such requests again.
    public var retryAfter: UInt32?
    /// Per-filter results, when acknowledging a SUBSCRIBE (in request order).
    public var subscriptions: [SubscriptionResult]
    /// With a message archive: in the ACK of a CHAT, the message's offset in the sender's own
    /// stream; in the ACK of a SYNC, the stream's end it caught up to (STREAM_OFFSET).
    public var streamOffset: UInt64?
    /// In the ACK of a SYNC: the archive's epoch (STREAM_EPOCH).
    public var streamEpoch: UInt64?
    /// In the ACK of a SYNC: how the device's position was taken.
    public var syncStatus: IMSyncStatus?
    /// In the ACK of a READ_MARKER: the marker now (READ_THROUGH).
    public var readThrough: UInt64?
    /// In the ACK of a READ_MARKER: messages from others after it (UNREAD).
    public var unread: UInt32?
    /// Whether this ACK was decoded from the seed client's 4-byte form.
    public var isSeedForm: Bool

    /// Creates an ACK for the frame with `sequence`.
    public init(
        sequence: UInt32,
        messageID: String? = nil,
        serverTime: UInt64? = nil,
        tokenExpiry: UInt64? = nil,
        error: IMErrorCode? = nil,
        errorMessage: String? = nil,
        retryAfter: UInt32? = nil,
        subscriptions: [SubscriptionResult] = [],
        streamOffset: UInt64? = nil,
        streamEpoch: UInt64? = nil,
        syncStatus: IMSyncStatus? = nil,
        readThrough: UInt64? = nil,
        unread: UInt32? = nil
    ) {
        self.sequence = sequence
        self.messageID = messageID
        self.serverTime = serverTime
        self.tokenExpiry = tokenExpiry
        self.error = error
        self.errorMessage = errorMessage
        self.retryAfter = retryAfter
        self.subscriptions = subscriptions
        self.streamOffset = streamOffset
        self.streamEpoch = streamEpoch
        self.syncStatus = syncStatus
        self.readThrough = readThrough
        self.unread = unread
        self.isSeedForm = false
    }

    /// A negative ACK refusing the frame with `sequence`.
    public static func refusing(sequence: UInt32, code: IMErrorCode, message: String? = nil) -> Ack {
        Ack(sequence: sequence, error: code, errorMessage: message)
    }

    /// A negative ACK RATE_LIMITED: send such requests again in `retryAfter` milliseconds.
    public static func rateLimited(sequence: UInt32, retryAfter: UInt32, message: String? = nil) -> Ack {
        Ack(sequence: sequence, error: .rateLimited, errorMessage: message, retryAfter: retryAfter)
    }

    /// A positive ACK of the ``TokenRefresh`` with `sequence`: the session now ends at
    /// `tokenExpiry` (the new token's `exp`, Unix milliseconds).
    public static func tokenRefreshed(sequence: UInt32, tokenExpiry: UInt64) -> Ack {
        Ack(sequence: sequence, tokenExpiry: tokenExpiry)
    }

    /// A negative ACK STORE_UNAVAILABLE: the archive could not store the message; send it again
    /// in `retryAfter` milliseconds.
    public static func storeUnavailable(sequence: UInt32, retryAfter: UInt32, message: String? = nil) -> Ack {
        Ack(sequence: sequence, error: .storeUnavailable, errorMessage: message, retryAfter: retryAfter)
    }

    /// Whether this ACK refuses the frame.
    public var isNegative: Bool { self.error != nil }

    /// Reads an ACK, in the standard or the seed client's form.
    public init(frame: IMFrame) throws(IMWireError) {
        guard frame.header.type == .ack else {
            throw .unexpectedFrameType(expected: .ack, actual: frame.header.type)
        }
        if frame.header.compressType == .none, frame.body.readableBytes == IMWire.seedAckBodyLength,
            let sequence = frame.body.getInteger(at: frame.body.readerIndex, endianness: .big, as: UInt32.self)
        {
            self.init(sequence: sequence)
            self.isSeedForm = true
            return
        }
        let fields = try frame.fields()
        self.init(sequence: frame.header.sequence)
        self.messageID = try fields.optional(.messageID)?.string(length: IMWire.messageIDLength)
        self.serverTime = try fields.optionalInteger(.serverTime)
        self.tokenExpiry = try fields.optionalInteger(.tokenExpiry)
        self.error = try fields.optionalInteger(.errorCode, as: UInt16.self).map(IMErrorCode.init(rawValue:))
        self.errorMessage = try fields.optionalString(.errorMessage)
        self.retryAfter = try fields.optionalInteger(.retryAfter, as: UInt32.self)
        self.streamOffset = try fields.optionalInteger(.streamOffset)
        self.streamEpoch = try fields.optionalInteger(.streamEpoch)
        self.syncStatus = try fields.optionalInteger(.syncStatus, as: UInt8.self).map(IMSyncStatus.init(rawValue:))
        self.readThrough = try fields.optionalInteger(.readThrough)
        self.unread = try fields.optionalInteger(.unread)
        if let list = try fields.optional(.container) {
            for record in try list.items().all(.container) {
                self.subscriptions.append(try SubscriptionResult(fields: record.items()))
            }
        }
    }

    /// The plain TLV body (empty for a plain ACK).
    public func body(allocator: ByteBufferAllocator = ByteBufferAllocator()) -> ByteBuffer {
        var writer = TLVWriter(allocator: allocator, capacity: 0)
        if let messageID { writer.write(.messageID, string: messageID) }
        if let serverTime { writer.write(.serverTime, integer: serverTime) }
        if let tokenExpiry { writer.write(.tokenExpiry, integer: tokenExpiry) }
        if let error { writer.write(.errorCode, integer: error.rawValue) }
        if let errorMessage { writer.write(.errorMessage, string: errorMessage) }
        if let retryAfter { writer.write(.retryAfter, integer: retryAfter) }
        if let syncStatus { writer.write(.syncStatus, integer: syncStatus.rawValue) }
        if let streamOffset { writer.write(.streamOffset, integer: streamOffset) }
        if let streamEpoch { writer.write(.streamEpoch, integer: streamEpoch) }
        if let readThrough { writer.write(.readThrough, integer: readThrough) }
        if let unread { writer.write(.unread, integer: unread) }
        if !self.subscriptions.isEmpty {
            writer.writeContainer { list in
                for result in self.subscriptions { result.write(to: &list) }
            }
        }
        return writer.buffer
    }

    /// The ACK frame: header sequence = ``sequence``; `sessionID` echoes the acknowledged frame's.
    public func frame(timestamp: UInt32, sessionID: UInt16) -> IMFrame {
        IMFrame(type: .ack, sequence: self.sequence, timestamp: timestamp, sessionID: sessionID, body: self.body())
    }
}

extension IMFrame {
    /// A plain ACK of this frame: same sequence and session id, empty body.
    /// - Parameter timestamp: Unix seconds at the sender; `nil` echoes this frame's timestamp.
    public func ack(timestamp: UInt32? = nil) -> IMFrame {
        Ack(sequence: self.header.sequence).frame(
            timestamp: timestamp ?? self.header.timestamp,
            sessionID: self.header.sessionID
        )
    }
}
