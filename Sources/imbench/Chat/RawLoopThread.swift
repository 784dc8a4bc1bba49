import CMosquitto
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The thread that drives a set of raw libmosquitto handles (``RawLoopRound``), what it
/// shares with the task that made it, and its end: the raw paths' clients (``RawMQTTClients``,
/// ``RawGroupClients``) start it once their handles are connected, ask things of it through
/// ``shared`` and ``wake()``, and ``close(_:)`` it.
///
/// Hand-written because it is the baseline: raw libmosquitto handles on one thread of their
/// own, as the gateway's loop drives its clients, without the wrapper it is measured against.
final class RawLoopThread<Shared: Sendable>: Sendable {
    private struct Lifecycle {
        var started = false
        var ended = false
        /// `close`, waiting for the thread to end.
        var waiter: CheckedContinuation<Void, Never>?
    }

    /// What the loop and other threads share (requests to the loop, what it reports).
    let shared: Mutex<Shared>
    /// An eventfd the loop polls beside its handles.
    let wakeFD: Int32
    private let lifecycle = Mutex(Lifecycle())

    init(_ shared: Shared) {
        self.shared = Mutex(shared)
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
    }

    deinit {
        Glibc.close(wakeFD)
    }

    /// Starts the thread, named `name`, running `body`; `body` returns once the loop is done.
    func start(name: String, _ body: @escaping @Sendable () -> Void) {
        lifecycle.withLock { $0.started = true }
        Thread.detachNewThread { [self] in
            cmosq_set_thread_name(name)
            body()
            let waiter = lifecycle.withLock { lifecycle in
                lifecycle.ended = true
                defer { lifecycle.waiter = nil }
                return lifecycle.waiter
            }
            waiter?.resume()
        }
    }

    /// Looks at ``shared`` every millisecond until `condition` holds (what the loop reports
    /// has no waiter to resume: it is read, not awaited); throws `timedOut` after `seconds`.
    func waitUntil(within seconds: Double, timedOut: @autoclosure () -> any Error, _ condition: (Shared) throws -> Bool) async throws {
        let deadline = MonotonicClock.nanoseconds() + UInt64(seconds * 1e9)
        while MonotonicClock.nanoseconds() < deadline {
            if try condition(shared.withLock { $0 }) { return }
            try await Task.sleep(for: .milliseconds(1))
        }
        throw timedOut()
    }

    /// Wakes the loop from its poll.
    func wake() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Tells the loop to end (`stopping` marks it in ``shared``) and returns once the thread
    /// has ended, or at once if it never started.
    func close(_ stopping: (inout Shared) -> Void) async {
        shared.withLock { stopping(&$0) }
        await withCheckedContinuation { continuation in
            let done = lifecycle.withLock { lifecycle -> Bool in
                if !lifecycle.started || lifecycle.ended { return true }
                lifecycle.waiter = continuation
                return false
            }
            if done { continuation.resume() } else { wake() }
        }
    }
}
