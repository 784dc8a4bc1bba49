/// How the gateway took a device's position in its stream (SYNC_STATUS, u8), in LOGIN_OK and
/// the ACK of a SYNC.
public struct IMSyncStatus: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The code on the wire.
    public var rawValue: UInt8

    /// Wraps a code.
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// 0: the device's position (its own, or the one the gateway kept for it) was taken; it
    /// gets every stored message after it.
    public static let continued = IMSyncStatus(rawValue: 0)
    /// 1: the gateway knows no position of this device (its first login since the archive
    /// exists): it starts at the stream's end, with what is sent from now on.
    public static let new = IMSyncStatus(rawValue: 1)
    /// 2: the device's position is of another epoch (the archive was replaced): it means
    /// nothing now. The gateway's own position of the device was taken if it has one, else
    /// the stream's end.
    public static let epochChanged = IMSyncStatus(rawValue: 2)
    /// 3: messages after the position were deleted (retention): the device gets what is left.
    public static let expired = IMSyncStatus(rawValue: 3)
    /// 4: the position is past the stream's end (not one the gateway gave out): refused; the
    /// gateway's own position of the device was taken, else the stream's end.
    public static let refused = IMSyncStatus(rawValue: 4)
    /// 5: the archive could not be read: no catch-up now (live messages flow); the gateway
    /// tries again, and the device may send SYNC later.
    public static let unavailable = IMSyncStatus(rawValue: 5)

    public var description: String {
        switch self {
        case .continued: "continued"
        case .new: "new"
        case .epochChanged: "epoch changed"
        case .expired: "partly expired"
        case .refused: "refused"
        case .unavailable: "archive unavailable"
        default: "status \(rawValue)"
        }
    }
}

/// A place in a user's stream of stored messages: the device has everything up to `offset`
/// of the archive's `epoch` (STREAM_EPOCH and STREAM_OFFSET in LOGIN and SYNC).
public struct StreamPosition: Hashable, Sendable, CustomStringConvertible {
    /// The archive's epoch the offset belongs to.
    public var epoch: UInt64
    /// Everything up to this offset.
    public var offset: UInt64

    /// A position.
    public init(epoch: UInt64, offset: UInt64) {
        self.epoch = epoch
        self.offset = offset
    }

    public var description: String { "\(offset)@\(epoch)" }

    /// Reads STREAM_EPOCH and STREAM_OFFSET: both or neither (one alone: BAD_REQUEST).
    static func read(_ fields: TLVFields) throws(IMWireError) -> StreamPosition? {
        let epoch: UInt64? = try fields.optionalInteger(.streamEpoch)
        let offset: UInt64? = try fields.optionalInteger(.streamOffset)
        switch (epoch, offset) {
        case (nil, nil): return nil
        case (let epoch?, let offset?): return StreamPosition(epoch: epoch, offset: offset)
        case (nil, _): throw .missingField(.streamEpoch)
        case (_, nil): throw .missingField(.streamOffset)
        }
    }

    func write(to writer: inout TLVWriter) {
        writer.write(.streamEpoch, integer: epoch)
        writer.write(.streamOffset, integer: offset)
    }
}
