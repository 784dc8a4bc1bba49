import NIOCore

/// One direction's queue of chunks waiting for their delivery time: latency, bandwidth and
/// order, with no I/O and no clock of its own (the caller passes the times), so it can be
/// tested alone.
///
/// Delivery times never decrease: a chunk is due at
/// `max(previous chunk's time, ready + latency)`, where `ready` is its arrival, or the time
/// the bandwidth-limited link has carried it. With a bandwidth limit a chunk is cut into
/// slices (a fiftieth of a second's worth, at least 512 bytes) so that it trickles out as
/// it would over a slow link instead of arriving all at once.
struct DelayLine {
    private struct Chunk {
        var due: NIODeadline
        var bytes: ByteBuffer
    }

    private static let minimumSlice = 512

    private var chunks = CircularBuffer<Chunk>()
    /// The bytes waiting, for backpressure.
    private(set) var queuedBytes = 0
    private var lastDue = NIODeadline.uptimeNanoseconds(0)
    private var linkFreeAt = NIODeadline.uptimeNanoseconds(0)
    /// When the source's close is to be delivered, once it closed.
    private(set) var endDue: NIODeadline?

    /// No chunk is waiting (the close may still be).
    var isEmpty: Bool { chunks.isEmpty }

    /// When the next chunk, or else the close, is due; nil when nothing is waiting.
    var nextDue: NIODeadline? { chunks.first?.due ?? endDue }

    /// Queues `bytes` that arrived at `arrival`, to be delivered after `latency` (and after
    /// the link has carried them when `bandwidth` is set, in bytes per second).
    mutating func enqueue(_ bytes: ByteBuffer, arrival: NIODeadline, latency: TimeAmount, bandwidth: Int?) {
        guard endDue == nil, bytes.readableBytes > 0 else { return }
        guard let bandwidth, bandwidth > 0 else {
            append(bytes, ready: arrival + latency)
            return
        }
        var remaining = bytes
        let sliceLength = max(Self.minimumSlice, bandwidth / 50)
        while remaining.readableBytes > 0,
            let slice = remaining.readSlice(length: min(sliceLength, remaining.readableBytes))
        {
            let start = max(linkFreeAt, arrival)
            let transmission = Int64(slice.readableBytes) * 1_000_000_000 / Int64(bandwidth)
            linkFreeAt = start + .nanoseconds(transmission)
            append(slice, ready: linkFreeAt + latency)
        }
    }

    /// Records that the source closed at `arrival`: the close is due after `latency`, and
    /// never before the last chunk. Later chunks are ignored.
    mutating func enqueueEnd(arrival: NIODeadline, latency: TimeAmount) {
        guard endDue == nil else { return }
        endDue = max(arrival + latency, lastDue)
    }

    /// Removes and returns the first chunk if it is due at `now`.
    mutating func popDue(now: NIODeadline) -> ByteBuffer? {
        guard let first = chunks.first, first.due <= now else { return nil }
        chunks.removeFirst()
        queuedBytes -= first.bytes.readableBytes
        return first.bytes
    }

    /// Every chunk was delivered and the close is due at `now`.
    func isFinished(now: NIODeadline) -> Bool {
        guard chunks.isEmpty, let endDue else { return false }
        return endDue <= now
    }

    /// Drops every waiting chunk (not the close) and returns how many bytes were dropped.
    mutating func removeAll() -> Int {
        let dropped = queuedBytes
        chunks.removeAll()
        queuedBytes = 0
        return dropped
    }

    private mutating func append(_ bytes: ByteBuffer, ready: NIODeadline) {
        let due = max(ready, lastDue)
        lastDue = due
        chunks.append(Chunk(due: due, bytes: bytes))
        queuedBytes += bytes.readableBytes
    }
}
