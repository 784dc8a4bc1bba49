import Synchronization

/// Hands out a pair's message sequences 1, 2, 3... to its publishing tasks.
final class SequenceClaim: Sendable {
    private let counter = Atomic<Int>(0)

    func next() -> Int { counter.wrappingAdd(1, ordering: .relaxed).newValue }
}
