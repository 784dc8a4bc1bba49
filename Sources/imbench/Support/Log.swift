import Foundation

/// Progress and diagnostics on stderr (stdout carries only the JSON result).
enum Log {
    static func info(_ message: String) {
        FileHandle.standardError.write(Data((message + "\n").utf8))
    }
}
