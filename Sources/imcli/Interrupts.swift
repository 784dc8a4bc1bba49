import Dispatch
import Foundation

/// SIGINT and SIGTERM as a stream (the default handlers are replaced for good).
enum Interrupts {
    // nonisolated(unsafe): written only by `stream()`, which each command calls once from its
    // `run()` before any concurrent work starts, and never read: it only keeps the sources
    // alive (dispatch sources are not Sendable, so a Mutex cannot hold them).
    nonisolated(unsafe) private static var sources: [any DispatchSourceSignal] = []

    static func stream() -> AsyncStream<Int32> {
        let (stream, sink) = AsyncStream.makeStream(of: Int32.self)
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { sink.yield(number) }
            source.resume()
            sources.append(source)
        }
        return stream
    }
}
