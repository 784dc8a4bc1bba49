import IMWire
import Mosquitto
import NIOCore

/// The connection's side of the message archive (docs/PROTOCOL.md 6.14), from LOGIN_OK:
/// chats on their way into the archive, where the device is in its stream (``StreamSync``),
/// what the broker delivered while the device was being caught up, SYNC requests waiting for
/// the catch-up under way.
struct ArchiveLink {
    /// Where the device is; `nil` until the archive could be read (at login, or later):
    /// meanwhile live messages are delivered as they come.
    var sync: StreamSync?
    /// The position the device gave at LOGIN, for a start decided after LOGIN_OK.
    var asked: StreamPosition?
    /// Messages from the broker held while catching up or above a gap, with their offsets (at
    /// most the broker's receive maximum: none of them is acknowledged to it until then).
    var held: [(message: MosquittoMessage, kind: GatewayTopics.Kind?, offset: UInt64)] = []
    /// Held messages are being asked about again (``DeviceConnection/releaseHeld()``).
    var releasing = false
    /// SYNC requests answered once the catch-up under way is done: their frames' headers, and
    /// the status and end the ACK says.
    var syncs: [(header: IMFrameHeader, status: IMSyncStatus, through: UInt64)] = []
    /// SYNC ACKs due once every chat delivery queued before them is written: the device takes an
    /// ACK as "everything up to its STREAM_OFFSET came before this".
    var syncAcks: [(ack: Ack, sessionID: UInt16)] = []
    /// When a gap is checked again, or a failed catch-up tried again (``ConnectionStateMachine/nextDeadline``).
    var deadline: NIODeadline?
    /// A catch-up (or the start) that could not read the archive is tried again.
    var retryCatchUp = false
    /// Entries of the archive that could not be read (logged once per connection).
    var unreadable = 0
}
