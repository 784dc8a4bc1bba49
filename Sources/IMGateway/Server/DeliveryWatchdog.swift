import Synchronization

/// One timer for the whole process that finds devices sitting on a delivery they never
/// ACK (under ack-through such a device holds its session's writes). A connection
/// registers its pending deliveries and what to do when one is overdue; once a second the
/// watchdog looks at every registered connection, instead of each connection waking up
/// on its own (4,500 idle devices would be 4,500 timers a second).
final class DeliveryWatchdog: Sendable {
    private struct Watched: Sendable {
        let deliveries: PendingDeliveries
        let overdue: @Sendable (Duration) -> Void
    }

    private let watched = Mutex<[UInt64: Watched]>([:])
    private let nextID = Atomic<UInt64>(0)
    let timeout: Duration

    init(timeout: Duration) {
        self.timeout = timeout
    }

    /// Watches `deliveries` until ``forget(_:)``; `overdue` runs (once) with the age of the
    /// oldest delivery when it passes the timeout.
    func watch(_ deliveries: PendingDeliveries, overdue: @escaping @Sendable (Duration) -> Void) -> UInt64 {
        let id = nextID.wrappingAdd(1, ordering: .relaxed).newValue
        watched.withLock { $0[id] = Watched(deliveries: deliveries, overdue: overdue) }
        return id
    }

    /// Stops watching a registration.
    func forget(_ id: UInt64) {
        _ = watched.withLock { $0.removeValue(forKey: id) }
    }

    /// How many connections are watched.
    var count: Int { watched.withLock { $0.count } }

    /// Checks every second until cancelled.
    func run() async {
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: .seconds(1))
            } catch {
                return
            }
            sweep()
        }
    }

    /// One check: every watched connection whose oldest delivery is overdue is told so,
    /// and forgotten.
    func sweep() {
        let overdue = watched.withLock { watched -> [(Watched, Duration)] in
            var found: [(UInt64, Watched, Duration)] = []
            for (id, entry) in watched {
                if let age = entry.deliveries.oldestAge, age > timeout { found.append((id, entry, age)) }
            }
            for (id, _, _) in found { watched[id] = nil }
            return found.map { ($0.1, $0.2) }
        }
        for (entry, age) in overdue { entry.overdue(age) }
    }
}
