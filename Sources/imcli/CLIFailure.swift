import ArgumentParser
import Foundation
import IMClient

/// A failure the user is told about (on stderr, and as a JSON line with --json), ending
/// the command with an exit code from `imcli --help`.
struct CLIFailure: Error {
    static let usage: Int32 = 1
    static let refused: Int32 = 2
    static let connection: Int32 = 3
    static let timeout: Int32 = 4

    var message: String
    var exitCode: Int32
    /// For --json: "usage", "refused", "connection", "timeout".
    var kind: String
    var code: IMErrorCode?

    static func usage(_ message: String) -> CLIFailure {
        CLIFailure(message: message, exitCode: usage, kind: "usage")
    }

    /// The failure for a client error; `timeout` is the ACK timeout in seconds, for the text.
    init(_ error: IMClientError, timeout: Double) {
        switch error {
        case .cannotConnect:
            self.init(message: "\(error) (is imgw running? make run)", exitCode: Self.connection, kind: "connection")
        case .tlsFailed:
            self.init(message: "\(error)", exitCode: Self.connection, kind: "connection")
        case .loginRefused(let code, _), .refused(let code, _):
            self.init(message: "\(error)", exitCode: Self.refused, kind: "refused", code: code)
        case .timeout:
            self.init(message: "no answer from the gateway within \(Output.seconds(timeout))", exitCode: Self.timeout, kind: "timeout")
        case .disconnected:
            self.init(message: "the gateway closed the connection", exitCode: Self.connection, kind: "connection")
        case .protocolViolation, .connectionDead, .networkChanged:
            self.init(message: "\(error)", exitCode: Self.connection, kind: "connection")
        case .kicked(let code, _):
            self.init(message: "\(error)", exitCode: Self.connection, kind: "connection", code: code)
        }
    }

    /// The gateway refused a request about `item` (a topic, a user).
    init(refused item: String, _ code: IMErrorCode, _ message: String?, hint: String? = nil) {
        self.init(
            message: "\(item) refused: \(Output.describe(code, message))\(hint.map { " (\($0))" } ?? "")",
            exitCode: Self.refused, kind: "refused", code: code)
    }

    init(message: String, exitCode: Int32, kind: String, code: IMErrorCode? = nil) {
        self.message = message
        self.exitCode = exitCode
        self.kind = kind
        self.code = code
    }
}

/// Runs a command body: a `CLIFailure` or `IMClientError` is printed and becomes the exit code.
func reportingFailures(_ output: Output, timeout: Double, _ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let failure as CLIFailure {
        output.failure(failure)
        throw ExitCode(failure.exitCode)
    } catch let error as IMClientError {
        let failure = CLIFailure(error, timeout: timeout)
        output.failure(failure)
        throw ExitCode(failure.exitCode)
    }
}
