import IMWire

/// Where this device is in its user's stream of stored messages, on a gateway with a message
/// archive (PROTOCOL.md 6.14): the position it sends in LOGIN (so the gateway catches it up
/// from there, and no further back), and the offsets it has, so that a message delivered
/// twice (live and from the archive, or again after a reconnect) is surfaced once.
///
/// The position moves over offsets received in order, over the offsets of this device's own
/// messages (their ACK says where they were stored), and, at a SYNC's ACK, over everything up
/// to the end it caught up to (what came before the ACK is all the device needs). Pure.
public struct StreamCursor: Sendable, Hashable {
    /// The archive's epoch; `nil` until a gateway with an archive said it.
    public private(set) var epoch: UInt64?
    /// Everything up to this offset was received (or is not for this device).
    public private(set) var offset: UInt64
    /// Offsets received above ``offset``.
    private var above: Set<UInt64> = []
    /// The most offsets kept above ``offset`` (a gap the gateway never fills is given up).
    static let maxAbove = 8_192

    /// A cursor at `position` (one an app kept from an earlier run), or nowhere.
    public init(position: StreamPosition? = nil) {
        self.epoch = position?.epoch
        self.offset = position?.offset ?? 0
    }

    /// What LOGIN and SYNC carry: `nil` before a gateway said its epoch.
    public var position: StreamPosition? { epoch.map { StreamPosition(epoch: $0, offset: offset) } }

    /// A delivery at `offset` (of the current epoch): `true` the first time, `false` for one
    /// received before.
    public mutating func received(_ offset: UInt64) -> Bool {
        guard offset > self.offset, !above.contains(offset) else { return false }
        if offset == self.offset + 1 {
            self.offset = offset
            while above.remove(self.offset + 1) != nil { self.offset += 1 }
        } else {
            above.insert(offset)
            if above.count > Self.maxAbove, let lowest = above.min() {
                self.offset = lowest
                above.remove(lowest)
                while above.remove(self.offset + 1) != nil { self.offset += 1 }
            }
        }
        return true
    }

    /// LOGIN_OK said where the gateway catches this device up from, of which epoch, and how
    /// it took the device's position. A position it did not take (another epoch, refused, or
    /// none kept: a new device) starts the cursor again there.
    public mutating func loggedIn(epoch: UInt64, offset: UInt64, status: IMSyncStatus) {
        if status == .unavailable { return }
        if status == .continued || status == .expired {
            caughtUp(through: offset, epoch: epoch)
        } else {
            self.epoch = epoch
            self.offset = offset
            above = []
        }
    }

    /// A SYNC's ACK (or LOGIN_OK) of `epoch`: everything up to `through` came before it.
    public mutating func caughtUp(through: UInt64, epoch: UInt64) {
        guard self.epoch == nil || self.epoch == epoch else {
            self.epoch = epoch
            self.offset = through
            above = []
            return
        }
        self.epoch = epoch
        guard through > offset else { return }
        offset = through
        above = above.filter { $0 > through }
        while above.remove(offset + 1) != nil { offset += 1 }
    }
}
