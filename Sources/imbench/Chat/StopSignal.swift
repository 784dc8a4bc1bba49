import Synchronization

/// A flag set once, read by many tasks (the direct path's publishers).
final class StopSignal: Sendable {
    private let flag = Atomic<Bool>(false)

    func set() { flag.store(true, ordering: .relaxed) }

    var isSet: Bool { flag.load(ordering: .relaxed) }
}
