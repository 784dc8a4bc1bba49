import ArgumentParser
import Dispatch
import Foundation
import IMClient

/// `imcli listen`: print what arrives.
struct Listen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print one line per message, receipt and presence change as they arrive.",
        discussion: """
            Logs in as device cli unless --device is given; messages queued for that device
            while it was offline arrive first. Ctrl-C logs the device out and exits 0; being
            kicked or disconnected exits 3.
            """)

    @OptionGroup var options: ClientOptions

    func run() async throws {
        let output = options.output
        try await reportingFailures(output, timeout: options.timeout) {
            let client = try await IMClient.connect(try await options.clientConfiguration(defaultDevice: "cli"))
            let session = client.session
            output.status("listening as \(session.userID)/\(session.deviceID ?? "default") on \(client.configuration.host):\(client.configuration.port) (Ctrl-C to stop)")
            let exitCode = await printEvents(of: client, output) { _ in true }
            if exitCode != 0 { throw ExitCode(exitCode) }
        }
    }
}

/// `imcli presence USER...`: print presence changes of watched users.
struct WatchPresence: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "presence",
        abstract: "Watch users' presence: their devices' current state, then every change.",
        discussion: """
            Logs in as device cli-presence unless --device is given (so a running
            `imcli listen` as the same user is not taken over). Ctrl-C logs out and exits 0.
            """)

    @OptionGroup var options: ClientOptions

    @Argument(help: "The users to watch.")
    var users: [String]

    func validate() throws {
        guard !users.isEmpty else { throw ValidationError("name at least one user to watch") }
    }

    func run() async throws {
        let output = options.output
        try await reportingFailures(output, timeout: options.timeout) {
            let client = try await IMClient.connect(try await options.clientConfiguration(defaultDevice: "cli-presence"))
            do {
                try await client.watchPresence(users)
            } catch {
                await client.close()
                throw error
            }
            output.status("watching \(users.joined(separator: ", ")) (Ctrl-C to stop)")
            let exitCode = await printEvents(of: client, output) { event in
                switch event {
                case .message, .receipt: false
                default: true
                }
            }
            if exitCode != 0 { throw ExitCode(exitCode) }
        }
    }
}

/// Prints the client's events (those `shown`) until the connection ends. The first SIGINT
/// or SIGTERM logs out (then 0 is returned), a second one exits at once. Returns 3 when
/// the gateway kicked the device or the connection was lost.
func printEvents(of client: IMClient, _ output: Output, shown: @escaping (IMClient.Event) -> Bool) async -> Int32 {
    let interrupts = Interrupts.stream()
    let stopper = Task {
        var stopping = false
        for await _ in interrupts {
            if stopping { exit(130) }
            stopping = true
            Task { await client.logout() }
        }
    }
    defer { stopper.cancel() }
    var exitCode: Int32 = 0
    for await event in client.events {
        if shown(event) { output.event(event) }
        switch event {
        case .kicked, .disconnected: exitCode = CLIFailure.connection
        default: break
        }
    }
    return exitCode
}

/// SIGINT and SIGTERM as a stream (the default handlers are replaced for good).
enum Interrupts {
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
