import Mosquitto
import NIOCore
import Synchronization

/// Wakes device connections for the mail posted to them on the MQTT loop: once per event
/// loop and turn of the MQTT loop, not once per mailbox.
///
/// One turn of the MQTT loop reads whatever the broker sent on every session that is
/// readable, and posts to each connection's ``ConnectionMailbox``. Handing each mailbox to
/// its event loop at once costs an `execute` (a write to the event loop's eventfd, and its
/// wake-up) per message whenever the event loop keeps up; gathered until the turn ends,
/// every connection of an event loop is drained by one task. Mail posted from any other
/// thread (tests, a session that is not on the MQTT loop) wakes its connection at once.
///
/// Hand-written because what it gathers by, the MQTT loop's turn
/// (``MosquittoEventLoop/afterCurrentTurn(_:)``), is ours: no library knows it.
final class MailboxWakeups: Sendable {
    private struct Pending {
        /// Drains by event loop, in the order they were woken.
        var byLoop: [(loop: any EventLoop, drains: [@Sendable () -> Void])] = []
        /// A flush is registered for the end of the current turn.
        var scheduled = false
        /// Tasks handed to event loops (for tests and statistics).
        var hops = 0
    }

    private let mqttLoop: MosquittoEventLoop
    private let pending = Mutex(Pending())

    init(mqttLoop: MosquittoEventLoop) {
        self.mqttLoop = mqttLoop
    }

    /// Runs `drain` on `eventLoop`: at the end of the MQTT loop's current turn when called
    /// on the MQTT loop, at once otherwise.
    func wake(on eventLoop: any EventLoop, _ drain: @escaping @Sendable () -> Void) {
        guard mqttLoop.inLoop else {
            pending.withLock { $0.hops += 1 }
            eventLoop.execute(drain)
            return
        }
        let schedule = pending.withLock { pending -> Bool in
            if let index = pending.byLoop.firstIndex(where: { $0.loop === eventLoop }) {
                pending.byLoop[index].drains.append(drain)
            } else {
                pending.byLoop.append((eventLoop, [drain]))
            }
            defer { pending.scheduled = true }
            return !pending.scheduled
        }
        if schedule {
            mqttLoop.afterCurrentTurn { [self] in flush() }
        }
    }

    /// Tasks handed to event loops so far.
    var hops: Int { pending.withLock { $0.hops } }

    private func flush() {
        let byLoop = pending.withLock { pending in
            pending.scheduled = false
            pending.hops += pending.byLoop.count
            defer { pending.byLoop.removeAll(keepingCapacity: true) }
            return pending.byLoop
        }
        for (loop, drains) in byLoop {
            loop.execute {
                for drain in drains { drain() }
            }
        }
    }
}
