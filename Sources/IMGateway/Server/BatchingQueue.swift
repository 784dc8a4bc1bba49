/// A FIFO between two tasks of a connection, read in batches: the reader takes everything
/// queued (up to a limit) in one go, so that work arriving faster than it is done is
/// handled, and written to the socket, in groups.
final class BatchingQueue<Element: Sendable>: Sendable {
    private let queue = WaitingQueue<[Element]>([])

    /// Adds an element (ignored after ``finish()``).
    func append(_ element: Element) {
        queue.produce { $0.append(element) }
    }

    /// Ends the queue: the reader gets what is left, then an empty batch.
    func finish() {
        queue.finish()
    }

    /// The next elements in order (at least one, at most `limit`), or none once finished
    /// and empty. One reader at a time.
    func next(upTo limit: Int) async -> [Element] {
        await queue.consume { items -> [Element]? in
            guard !items.isEmpty else { return nil }
            let count = min(limit, items.count)
            defer { items.removeFirst(count) }
            return Array(items.prefix(count))
        } ?? []
    }
}
