import Mosquitto
import NIOCore
import NIOEmbedded
import Synchronization
import Testing

@testable import IMGateway

@Suite("MailboxWakeups", .timeLimit(.minutes(1)))
struct MailboxWakeupsTests {
    @Test("mail posted during one turn of the MQTT loop costs one task per event loop, drained in order; elsewhere, one task at once")
    func oneTaskPerEventLoopAndTurn() async throws {
        let mqtt = MosquittoEventLoop(name: "wakeups-loop")
        let first = NIOAsyncTestingEventLoop()
        let second = NIOAsyncTestingEventLoop()
        let wakeups = MailboxWakeups(mqttLoop: mqtt)
        let drained = Mutex<[Int]>([])
        await mqtt.submit {
            for index in 0..<100 {
                wakeups.wake(on: index % 2 == 0 ? first : second) { drained.withLock { $0.append(index) } }
            }
        }
        // A later job runs after the turn that ran the first one ended.
        await mqtt.submit {}
        #expect(wakeups.hops == 2)
        await first.run()
        await second.run()
        let all = drained.withLock { $0 }
        #expect(all.filter { $0 % 2 == 0 } == Array(stride(from: 0, to: 100, by: 2)))
        #expect(all.filter { $0 % 2 == 1 } == Array(stride(from: 1, to: 100, by: 2)))

        // Not on the MQTT loop: at once, one task.
        wakeups.wake(on: first) { drained.withLock { $0.append(-1) } }
        #expect(wakeups.hops == 3)
        await first.run()
        #expect(drained.withLock { $0.last } == -1)

        try await first.shutdownGracefully()
        try await second.shutdownGracefully()
        mqtt.shutdown()
        await mqtt.waitForStop()
    }
}
