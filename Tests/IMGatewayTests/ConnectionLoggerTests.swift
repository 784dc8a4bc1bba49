import Logging
import Synchronization
import Testing

@testable import IMGateway

/// A connection's lines carry its peer, then its user and device, without a logger of its own.
@Suite struct ConnectionLoggerTests {
    /// Keeps what is logged through it.
    final class Recorder: Sendable {
        struct Line: Sendable {
            var level: Logger.Level
            var message: String
            var metadata: [String: String]
        }
        let lines = Mutex<[Line]>([])

        func logger(level: Logger.Level) -> Logger {
            var logger = Logger(label: "test") { _ in Handler(recorder: self) }
            logger.logLevel = level
            return logger
        }

        struct Handler: LogHandler {
            let recorder: Recorder
            var metadata: Logger.Metadata = [:]
            var logLevel: Logger.Level = .trace
            subscript(metadataKey key: String) -> Logger.Metadata.Value? {
                get { metadata[key] }
                set { metadata[key] = newValue }
            }
            func log(event: LogEvent) {
                let merged = metadata.merging(event.metadata ?? [:]) { $1 }
                recorder.lines.withLock {
                    $0.append(Line(level: event.level, message: "\(event.message)", metadata: merged.mapValues { "\($0)" }))
                }
            }
        }
    }

    @Test func linesCarryThePeerThenTheUserAndDevice() throws {
        let recorder = Recorder()
        var logger = ConnectionLogger(recorder.logger(level: .info), peer: "127.0.0.1:5000")
        logger.notice("before login", metadata: ["reason": "x"])
        logger.identify(user: "alice", device: "phone")
        logger.warning("after login", metadata: ["device": "overridden by the line"])
        let lines = recorder.lines.withLock { $0 }
        #expect(lines.count == 2)
        let first = try #require(lines.first)
        #expect(first.level == .notice)
        #expect(first.metadata == ["peer": "127.0.0.1:5000", "reason": "x"])
        let second = try #require(lines.last)
        #expect(second.message == "after login")
        #expect(second.metadata == ["peer": "127.0.0.1:5000", "user": "alice", "device": "overridden by the line"])
        // For code that takes a Logger.
        logger.logger.error("through a Logger")
        #expect(recorder.lines.withLock { $0.last?.metadata } == ["peer": "127.0.0.1:5000", "user": "alice", "device": "phone"])
    }

    @Test func nothingIsBuiltBelowTheLevel() {
        let recorder = Recorder()
        let logger = ConnectionLogger(recorder.logger(level: .notice), peer: "p")
        let built = Mutex(false)
        func expensive() -> Logger.Metadata {
            built.withLock { $0 = true }
            return [:]
        }
        logger.debug("not logged", metadata: expensive())
        logger.info("not logged either", metadata: expensive())
        #expect(recorder.lines.withLock { $0.isEmpty })
        #expect(built.withLock { $0 } == false)
    }
}
