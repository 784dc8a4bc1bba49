import IMWire
import Mosquitto
import NIOCore

/// The archive-sync machine of a logged-in connection (docs/PROTOCOL.md 6.14): where the device
/// is in its user's stream (``StreamSync``), the catch-up under way, the messages the broker
/// delivered meanwhile, SYNC requests waiting for the catch-up, gaps, and a start or a
/// catch-up to try again. Part of ``LoggedIn``; the steps that touch the rest of the data path
/// (the downlink, the uplink, the frames) are ``ConnectionStateMachine``'s
/// (ConnectionStateMachine+Archive.swift).
struct ArchiveSync: Sendable {
    /// A message from the broker held while catching up, or above a gap.
    struct Held: Sendable {
        var message: MosquittoMessage
        var kind: GatewayTopics.Kind?
        var offset: UInt64
    }

    /// A SYNC answered once the catch-up under way is done: its frame's header, and the status
    /// and the stream's end its ACK says.
    struct WaitingSync: Sendable {
        var header: IMFrameHeader
        var status: IMSyncStatus
        var through: UInt64
    }

    /// How long a catch-up whose read failed waits before it is tried again.
    static let catchUpRetry: TimeAmount = .seconds(2)

    /// The archive's epoch.
    let epoch: UInt64
    /// Where the device is; `nil` until the archive could be read (at login, or later):
    /// meanwhile live messages are delivered as they come.
    var sync: StreamSync?
    /// The position the device gave at LOGIN, for a start decided after LOGIN_OK.
    var asked: StreamPosition?
    /// Messages from the broker held while catching up or above a gap, with their offsets (at
    /// most the broker's receive maximum: none of them is acknowledged to it until then).
    var held: [Held] = []
    /// Held messages are being asked about again.
    var releasing = false
    /// SYNC requests answered once the catch-up under way is done.
    var syncs: [WaitingSync] = []
    /// SYNC ACKs due once every chat delivery queued before them is written: the device takes
    /// an ACK as "everything up to its STREAM_OFFSET came before this".
    var syncAcks: [(ack: Ack, sessionID: UInt16)] = []
    /// When a gap is checked again, or a failed catch-up tried again.
    var deadline: NIODeadline?
    /// A catch-up (or the start) that could not read the archive is tried again.
    var retryCatchUp = false
    /// Entries of the archive that could not be read (logged once per connection).
    var unreadable = 0

    init(epoch: UInt64, asked: StreamPosition?) {
        self.epoch = epoch
        self.asked = asked
    }

    /// Arms the timer for `now + delay`, unless it is armed.
    mutating func arm(now: NIODeadline, after delay: TimeAmount) {
        if deadline == nil { deadline = now + delay }
    }

    /// Whether the timer is due at `now`; it is disarmed if so.
    mutating func timerDue(now: NIODeadline) -> Bool {
        guard let deadline, now >= deadline else { return false }
        self.deadline = nil
        return true
    }

    /// The held messages to ask about again, in the order of their offsets, if the sync lets
    /// them go now (they are taken out: those still above a gap are held again).
    mutating func releasable() -> [Held]? {
        guard !held.isEmpty, !releasing, sync?.canRelease == true else { return nil }
        defer { held = [] }
        return held.sorted { $0.offset < $1.offset }
    }
}
