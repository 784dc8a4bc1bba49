import Testing

@testable import IMGateway

@Suite("WaitingQueue and BatchingQueue")
struct WaitingQueueTests {
    @Test("a consumer waiting while producers add gets every element, in order, then nothing once finished")
    func noLostWakeUps() async {
        let queue = BatchingQueue<Int>()
        let consumer = Task {
            var seen: [Int] = []
            while true {
                let batch = await queue.next(upTo: 7)
                if batch.isEmpty { return seen }
                #expect(batch.count <= 7)
                seen += batch
            }
        }
        for value in 0..<5_000 {
            queue.append(value)
            if value % 97 == 0 { await Task.yield() }
        }
        queue.finish()
        #expect(await consumer.value == Array(0..<5_000))
        queue.append(1)
        #expect(await queue.next(upTo: 10).isEmpty, "nothing is taken after finish")
    }

    @Test("cancelling the consumer ends its wait")
    func cancellation() async {
        let queue = WaitingQueue<[Int]>([])
        let consumer = Task { await queue.consume { $0.isEmpty ? nil : $0.removeFirst() } }
        consumer.cancel()
        #expect(await consumer.value == nil)
    }
}
