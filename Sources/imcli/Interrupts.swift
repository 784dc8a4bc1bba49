import Dispatch
import Foundation
import Synchronization

/// SIGINT and SIGTERM as a stream (the default handlers are replaced for good).
enum Interrupts {
    /// Kept alive for the life of the process.
    private static let sources = Mutex<[any DispatchSourceSignal]>([])

    static func stream() -> AsyncStream<Int32> {
        let (stream, sink) = AsyncStream.makeStream(of: Int32.self)
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { sink.yield(number) }
            source.resume()
            sources.withLock { $0.append(source) }
        }
        return stream
    }
}
