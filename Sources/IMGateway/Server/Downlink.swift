import IMWire

/// What the gateway sends a device on its own initiative (deliveries, receipts,
/// presence, locations, pub/sub), queued by priority and written by one task at the
/// pace of the socket: when the device reads slowly, chat goes first and stale presence
/// and positions are replaced by the latest (DownlinkQueue), so a slow link never drops
/// chat and never delays it behind locations. Replies (ACKs, errors) are written directly.
final class Downlink: Sendable {
    struct Entry: Sendable {
        var message: IMMessage
        /// The MQTT delivery to acknowledge when the device ACKs this frame.
        var deliveryID: UInt64?
        /// For a chat delivery: whom to send the "delivered" receipt.
        var origin: PendingDeliveries.Origin?
    }

    private let queue = WaitingQueue(DownlinkQueue<Entry>())

    /// Queues a frame; `coalescingKey` lets a newer presence or position replace a queued one.
    func enqueue(
        _ message: IMMessage, class kind: DownlinkClass, coalescingKey: String? = nil, deliveryID: UInt64? = nil,
        origin: PendingDeliveries.Origin? = nil
    ) {
        queue.produce { $0.enqueue(Entry(message: message, deliveryID: deliveryID, origin: origin), class: kind, coalescingKey: coalescingKey) }
    }

    /// Stops the writer.
    func finish() {
        queue.finish()
    }

    /// Writes queued frames in priority order until `finish()` (or cancellation).
    func run(_ writer: FrameWriter, sequence: OutboundSequence, deliveries: PendingDeliveries) async throws {
        while !Task.isCancelled {
            // What is queued goes out together, in one write and one flush (a burst of
            // deliveries costs one system call, not one each).
            let batch = await next(upTo: Self.batchSize)
            guard !batch.isEmpty else { return }
            let timestamp = unixSeconds()
            let frames = batch.map { entry in
                let number = sequence.next()
                if let deliveryID = entry.deliveryID { deliveries.insert(number, deliveryID, origin: entry.origin) }
                return entry.message.frame(sequence: number, timestamp: timestamp, sessionID: writer.sessionID)
            }
            // Suspends while the channel is not writable: the queue absorbs the backlog.
            try await writer.write(contentsOf: frames)
        }
    }

    /// Frames written at most in one batch: small enough that a newer presence or
    /// position can still replace a queued one while the socket is slow.
    static let batchSize = 32

    /// The next entries in priority order (at least one), or none once finished.
    private func next(upTo limit: Int) async -> [Entry] {
        await queue.consume { queue -> [Entry]? in
            var entries: [Entry] = []
            while entries.count < limit, let entry = queue.dequeue() { entries.append(entry) }
            return entries.isEmpty ? nil : entries
        } ?? []
    }
}
