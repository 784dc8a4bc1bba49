import Synchronization
import Testing

@testable import IMClient

/// End to end on the real clock. Bounds are generous (the machine may be loaded): lower
/// bounds are exact (a sleep never ends early), upper bounds allow seconds of delay.
@Suite("AsyncBatchSequence: batches of a stream, on the real clock", .timeLimit(.minutes(1)))
struct AsyncBatchSequenceTests {
    struct Failure: Error, Equatable {}

    /// A flag or counter shared with sequences and callbacks.
    final class Counter: Sendable {
        private let value = Mutex(0)
        func increment() { value.withLock { $0 += 1 } }
        var current: Int { value.withLock { $0 } }
    }

    /// Increments a counter when deallocated.
    final class ReleaseToken: Sendable {
        let counter: Counter
        init(_ counter: Counter) { self.counter = counter }
        deinit { counter.increment() }
    }

    /// The integers 0..<count, counting how many were read (and iterators released).
    struct CountingSequence: AsyncSequence, Sendable {
        typealias Element = Int
        typealias Failure = Never
        let count: Int
        let reads: Counter
        var released = Counter()

        struct AsyncIterator: AsyncIteratorProtocol {
            typealias Failure = Never
            let count: Int
            let reads: Counter
            let token: ReleaseToken
            var next = 0
            mutating func next() async -> Int? {
                guard next < count else { return nil }
                reads.increment()
                defer { next += 1 }
                return next
            }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(count: count, reads: reads, token: ReleaseToken(released)) }
    }

    /// Polls `condition` until it holds or `timeout` passes.
    static func eventually(within timeout: Duration = .seconds(10), _ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return condition()
    }

    @Test("12 elements at once arrive as [5, 5, 2] in order; the last two after the quiet interval")
    func burst() async {
        let (stream, input) = AsyncStream.makeStream(of: Int.self)
        // A timeout far from the interval: the full test run loads both cores, and the
        // partial batch must still be told apart from one that waited for the timeout.
        let policy = BatchPolicy(interval: .milliseconds(200), timeout: .seconds(20), maxCount: 5)
        let start = ContinuousClock.now
        for element in 0..<12 { input.yield(element) }
        var iterator = stream.batched(policy).makeAsyncIterator()
        let first = await iterator.next()
        let second = await iterator.next()
        #expect(first == [0, 1, 2, 3, 4])
        #expect(second == [5, 6, 7, 8, 9])
        let third = await iterator.next()
        let elapsed = ContinuousClock.now - start
        #expect(third == [10, 11])
        #expect(elapsed >= .milliseconds(200), "the partial batch waited for the quiet interval")
        #expect(elapsed < .seconds(20), "and not for the timeout")
        input.finish()
        #expect(await iterator.next() == nil)
        #expect(await iterator.next() == nil)
    }

    @Test("a steady trickle is cut by the timeout, not held until it stops")
    func trickle() async {
        let (stream, input) = AsyncStream.makeStream(of: Int.self)
        let policy = BatchPolicy(interval: .milliseconds(50), timeout: .milliseconds(300), maxCount: 1_000)
        let total = 50
        let producer = Task {
            for element in 0..<total {
                input.yield(element)
                try? await Task.sleep(for: .milliseconds(20))
            }
            input.finish()
        }
        var batches: [[Int]] = []
        for await batch in stream.batched(policy) {  // no `try`: the base never throws
            batches.append(batch)
        }
        await producer.value
        #expect(batches.joined().elementsEqual(0..<total))
        #expect(batches.allSatisfy { !$0.isEmpty })
        // Elements kept coming every 20 ms (less than the 50 ms interval) for a second: only
        // the 300 ms timeout can have delivered a batch before the end.
        #expect(batches.count >= 2, "batches: \(batches.map(\.count))")
        #expect(batches[0].count < total)
    }

    @Test("the end of the base delivers what was gathered at once, then ends")
    func flushAtEnd() async {
        let (stream, input) = AsyncStream.makeStream(of: Int.self)
        let policy = BatchPolicy(interval: .seconds(20), timeout: .seconds(40), maxCount: 100)
        var iterator = stream.batched(policy).makeAsyncIterator()
        let start = ContinuousClock.now
        input.yield(1)
        input.yield(2)
        input.yield(3)
        input.finish()
        #expect(await iterator.next() == [1, 2, 3])
        #expect(ContinuousClock.now - start < .seconds(10))
        #expect(await iterator.next() == nil)
    }

    @Test("an empty base ends without a batch")
    func emptyBase() async {
        let (stream, input) = AsyncStream.makeStream(of: Int.self)
        input.finish()
        var batches = 0
        for await _ in stream.batched() { batches += 1 }
        #expect(batches == 0)
    }

    @Test("the base's error comes after the batch gathered before it")
    func error() async throws {
        let (stream, input) = AsyncThrowingStream.makeStream(of: Int.self)
        let policy = BatchPolicy(interval: .seconds(20), timeout: .seconds(40), maxCount: 100)
        var iterator = stream.batched(policy).makeAsyncIterator()
        input.yield(1)
        input.yield(2)
        input.finish(throwing: Failure())
        #expect(try await iterator.next() == [1, 2])
        await #expect(throws: Failure.self) { try await iterator.next() }
        #expect(try await iterator.next() == nil)
    }

    @Test("many elements: full batches in order, the rest at the end")
    func manyInOrder() async {
        let reads = Counter()
        var batches: [[Int]] = []
        for await batch in CountingSequence(count: 500, reads: reads).batched(BatchPolicy(interval: .seconds(20), maxCount: 7)) {
            batches.append(batch)
        }
        #expect(batches.joined().elementsEqual(0..<500))
        #expect(batches.dropLast().allSatisfy { $0.count == 7 })
        #expect(batches.last == Array(497..<500))
        #expect(reads.current == 500)
    }

    @Test("a full batch waits for the consumer: the base is not read further meanwhile")
    func backpressure() async {
        let reads = Counter()
        let policy = BatchPolicy(interval: .seconds(20), timeout: .seconds(40), maxCount: 2)
        var iterator = CountingSequence(count: 100, reads: reads).batched(policy).makeAsyncIterator()
        #expect(await iterator.next() == [0, 1])
        // The producer reads the next full batch, then stops until it is taken.
        #expect(await Self.eventually { reads.current >= 4 })
        try? await Task.sleep(for: .milliseconds(200))
        #expect(reads.current == 4)
        #expect(await iterator.next() == [2, 3])
        #expect(await iterator.next() == [4, 5])
    }

    @Test("cancelling the consumer ends the iteration and cancels the reading of the base")
    func cancellation() async {
        let terminated = Counter()
        let (stream, input) = AsyncStream.makeStream(of: Int.self)
        input.onTermination = { _ in terminated.increment() }
        let policy = BatchPolicy(interval: .seconds(30), timeout: .seconds(60), maxCount: 100)
        let consumer = Task {
            var received: [[Int]] = []
            for await batch in stream.batched(policy) { received.append(batch) }
            return received
        }
        input.yield(1)  // a batch is gathering, due in 30 s
        try? await Task.sleep(for: .milliseconds(100))
        let start = ContinuousClock.now
        consumer.cancel()
        let received = await consumer.value
        #expect(received.isEmpty)
        #expect(ContinuousClock.now - start < .seconds(10), "cancellation did not wait for the batch's deadline")
        #expect(await Self.eventually { terminated.current == 1 }, "the base's iteration was cancelled")
    }

    @Test("cancelling a consumer waiting for the first element ends it too")
    func cancellationWhileIdle() async {
        let terminated = Counter()
        let (stream, input) = AsyncStream.makeStream(of: Int.self)
        input.onTermination = { _ in terminated.increment() }
        let consumer = Task {
            var iterator = stream.batched().makeAsyncIterator()
            return await iterator.next()
        }
        try? await Task.sleep(for: .milliseconds(50))
        consumer.cancel()
        #expect(await consumer.value == nil)
        #expect(await Self.eventually { terminated.current == 1 })
    }

    @Test("leaving the loop early stops the reading and lets go of the base")
    func earlyExit() async {
        let terminated = Counter()
        var first: [Int]?
        do {
            // Nothing but the batch sequence keeps this stream: it terminates once the
            // producer is cancelled (if it was reading) or has let go of it (if it waited).
            let stream = AsyncStream<Int> { input in
                input.onTermination = { _ in terminated.increment() }
                for element in 0..<10 { input.yield(element) }
            }
            for await batch in stream.batched(BatchPolicy(maxCount: 3)) {
                first = batch
                break
            }
        }
        #expect(first == [0, 1, 2])
        #expect(await Self.eventually { terminated.current == 1 })
    }

    @Test("leaving the loop while a full batch waits releases the base's iterator")
    func earlyExitWhileFull() async {
        let reads = Counter()
        let released = Counter()
        var first: [Int]?
        for await batch in CountingSequence(count: .max, reads: reads, released: released).batched(BatchPolicy(maxCount: 3)) {
            first = batch
            // The producer reads the next 3 and waits for them to be taken.
            #expect(await Self.eventually { reads.current >= 6 })
            break
        }
        #expect(first == [0, 1, 2])
        #expect(await Self.eventually { released.current == 1 })
        #expect(reads.current == 6)
    }
}
