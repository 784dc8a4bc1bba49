/// Buffers what an AsyncStream yields so a test can wait for the next element with a
/// deadline (a broken feature fails the test instead of hanging it).
actor Collector<Element: Sendable> {
    private var buffer: [Element] = []
    private var waiter: CheckedContinuation<Element?, Never>?
    private var finished = false
    private var consumer: Task<Void, Never>?

    init(_ stream: AsyncStream<Element>) {
        Task { await self.start(stream) }
    }

    private func start(_ stream: AsyncStream<Element>) {
        consumer = Task {
            for await element in stream { self.add(element) }
            self.finish()
        }
    }

    private func add(_ element: Element) {
        if let waiter {
            self.waiter = nil
            waiter.resume(returning: element)
        } else {
            buffer.append(element)
        }
    }

    private func finish() {
        finished = true
        waiter?.resume(returning: nil)
        waiter = nil
    }

    /// The next element, or a `TestError` after `seconds`.
    func next(within seconds: Double = 10, _ what: @autoclosure () -> String = "element") async throws -> Element {
        if !buffer.isEmpty { return buffer.removeFirst() }
        if finished { throw TestError("stream finished while waiting for \(what())") }
        let timeout = Task {
            try await Task.sleep(for: .seconds(seconds))
            self.expire()
        }
        defer { timeout.cancel() }
        let element = await withCheckedContinuation { waiter = $0 }
        guard let element else { throw TestError("no \(what()) within \(seconds) s") }
        return element
    }

    private func expire() {
        waiter?.resume(returning: nil)
        waiter = nil
    }

    /// Elements received and not taken yet.
    var pending: [Element] { buffer }
}
