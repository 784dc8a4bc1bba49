import ChildProcesses
import Foundation
import IMGateway
import Synchronization

/// The last lines a child process printed (for error messages), optionally echoed to stderr,
/// and a wait for a line that says it is ready.
final class OutputTail: Sendable {
    private let lines = Mutex<[String]>([])
    private let limit: Int
    private let prefix: String
    private let echo: Bool
    /// Every line also goes here, if set (appended).
    private let file: Mutex<FileHandle?>

    /// - Parameters:
    ///   - prefix: Put before each echoed line, e.g. `[imgw] `.
    ///   - echo: Copy every line to stderr.
    ///   - logFile: Append every line to this file too (created if need be).
    init(prefix: String, echo: Bool, limit: Int = 200, logFile: URL? = nil) {
        self.prefix = prefix
        self.echo = echo
        self.limit = limit
        var handle: FileHandle?
        if let logFile {
            if !FileManager.default.fileExists(atPath: logFile.path) {
                FileManager.default.createFile(atPath: logFile.path, contents: nil)
            }
            handle = try? FileHandle(forWritingTo: logFile)
            _ = try? handle?.seekToEnd()
        }
        file = Mutex(handle)
    }

    deinit {
        file.withLock { try? $0?.close() }
    }

    /// Reads `process`'s output for as long as it runs; returns once a line contains
    /// `marker` (true), or the output ended or `seconds` passed (false). Reading goes on
    /// after the return.
    func follow(_ process: ChildProcess, until marker: String?, within seconds: Double) async -> Bool {
        await process.follow(until: marker, within: .seconds(seconds)) { [self] line in append(line) }
    }

    private func append(_ line: String) {
        if echo { Log.info(prefix + line) }
        file.withLock { try? $0?.write(contentsOf: Data((line + "\n").utf8)) }
        lines.withLock { lines in
            lines.append(line)
            if lines.count > limit { lines.removeFirst(lines.count - limit) }
        }
    }

    /// The last `count` lines, joined with " | ".
    func last(_ count: Int = 8) -> String {
        lines.withLock { $0.suffix(count).joined(separator: " | ") }
    }
}
