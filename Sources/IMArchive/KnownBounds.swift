/// What a login reads of the archive (its stream's ``StreamBounds`` and its device's saved
/// position), kept in memory from the archive's own writes, so that the common login (a
/// device that comes back to a stream this gateway writes) costs the store no query. Only for
/// a store this gateway alone writes (``ArchiveStore/isSoleWriter``): with several gateways on
/// one store, another one moves the streams.
///
/// What it knows is exact or absent. A stream's last offset only grows (commits, tombstones),
/// so a commit raises it whether or not the rest is known; the first offset and the trimmed
/// mark change only by deletions (retention, the cap, erasure), which forget them for every
/// stream. A read's answer is taken only if no deletion came between the read's start and its
/// answer (``generation``), and is merged with the offsets committed meanwhile.
struct KnownBounds: Sendable {
    private struct Stream {
        /// The last offset given out, as far as this gateway's writes go.
        var last: UInt64
        /// The first offset still stored and the trimmed mark, when a read told them since the
        /// last deletion.
        var rest: (first: UInt64, trimmedThrough: UInt64)?
    }

    private struct Device: Hashable {
        var user: String
        var device: String
    }

    private struct Position {
        /// The highest offset saved (or read).
        var offset: UInt64?
        /// Whether a read told it (else only this gateway's saves are known).
        var exact: Bool
    }

    private var streams: [String: Stream] = [:]
    private var positions: [Device: Position] = [:]
    /// Moves at each deletion: a read that started before it is not taken.
    private(set) var generation: UInt64 = 0

    /// The bounds of `stream`, when known.
    func bounds(of stream: String) -> StreamBounds? {
        guard let known = streams[stream], let rest = known.rest else { return nil }
        return StreamBounds(last: known.last, first: rest.first, trimmedThrough: rest.trimmedThrough)
    }

    /// A read of `stream` that started at `generation` answered `bounds`.
    mutating func read(_ bounds: StreamBounds, of stream: String, since generation: UInt64) {
        guard generation == self.generation else { return }
        // Appends move only the last offset (an empty stream's first, last + 1, is the first
        // one appended since).
        let last = max(bounds.last, streams[stream]?.last ?? 0)
        streams[stream] = Stream(last: last, rest: (bounds.first, bounds.trimmedThrough))
    }

    /// A commit (or a deletion's tombstone) gave out `offset` of `stream`.
    mutating func appended(_ offset: UInt64, to stream: String) {
        if var known = streams[stream] {
            known.last = max(known.last, offset)
            streams[stream] = known
        } else {
            streams[stream] = Stream(last: offset, rest: nil)
        }
    }

    /// The saved position of `device` of `user`, when known (`.some(nil)`: none was ever saved).
    func position(user: String, device: String) -> UInt64?? {
        guard let known = positions[Device(user: user, device: device)], known.exact else { return nil }
        return .some(known.offset)
    }

    /// A read of the position that started at `generation` answered `offset`.
    mutating func read(position offset: UInt64?, user: String, device: String, since generation: UInt64) {
        guard generation == self.generation else { return }
        let key = Device(user: user, device: device)
        let saved = positions[key]?.offset
        positions[key] = Position(offset: [offset, saved].compactMap { $0 }.max(), exact: true)
    }

    /// A commit saved `position` (the store keeps the highest).
    mutating func saved(_ position: DevicePosition) {
        let key = Device(user: position.user, device: position.device)
        var known = positions[key] ?? Position(offset: nil, exact: false)
        known.offset = max(known.offset ?? 0, position.offset)
        positions[key] = known
    }

    /// Entries were deleted (retention, the cap): every stream's first offset and trimmed
    /// mark are read again.
    mutating func deleted() {
        generation &+= 1
        for key in streams.keys { streams[key]?.rest = nil }
    }

    /// `user` was erased: the stream's entries and the devices' positions are gone.
    mutating func erased(_ user: String) {
        deleted()
        positions = positions.filter { $0.key.user != user }
    }
}
