import AsyncToolkit

/// Buffers what an AsyncStream yields so a test can wait for the next element with a
/// deadline (a broken feature fails the test instead of hanging it).
package final class Collector<Element: Sendable>: Sendable {
    private struct State: Sendable {
        package var buffer: [Element] = []
        package var finished = false
    }

    private enum Outcome: Sendable {
        case element(Element)
        case finished
    }

    private let state = AsyncCondition(State())

    package init(_ stream: AsyncStream<Element>) {
        Task { [state] in
            for await element in stream { state.withLock { $0.buffer.append(element) } }
            state.withLock { $0.finished = true }
        }
    }

    /// The next element, or a `TestError` after `seconds`.
    package func next(within seconds: Double = 10, _ what: @autoclosure () -> String = "element") async throws -> Element {
        let outcome = await state.wait(timeout: .seconds(seconds)) { (state: inout State) -> Outcome? in
            if !state.buffer.isEmpty { return .element(state.buffer.removeFirst()) }
            return state.finished ? .finished : nil
        }
        switch outcome {
        case .element(let element)?: return element
        case .finished?: throw TestError("stream finished while waiting for \(what())")
        case nil: throw TestError("no \(what()) within \(seconds) s")
        }
    }

    /// Whether the stream finishes, with nothing left in it, within `seconds` (false when an
    /// element comes or the time passes).
    package func finishes(within seconds: Double = 10) async -> Bool {
        let outcome = await state.wait(timeout: .seconds(seconds)) { (state: inout State) -> Bool? in
            if !state.buffer.isEmpty { return false }
            return state.finished ? true : nil
        }
        return outcome ?? false
    }

    /// Elements received and not taken yet.
    package var pending: [Element] {
        get async { state.read(\.buffer) }
    }
}
