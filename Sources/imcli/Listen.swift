import ArgumentParser
import IMClient

/// `imcli listen`: print what arrives.
struct Listen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print one line per message, receipt, presence change, position and publication as they arrive.",
        discussion: """
            Logs in as device cli unless --device is given; messages queued for that
            device while it was offline arrive first. A lost connection (a gateway
            restart) is reconnected, with notices on stderr, and listening goes on.
            Ctrl-C logs the device out and exits 0; the session ending for good
            (taken over by another login of the same device, kicked) exits 3.
            """)

    @OptionGroup var options: ClientOptions

    func run() async throws {
        let output = options.output
        try await reportingFailures(output, timeout: options.timeout) {
            let client = try await options.connect(defaultDevice: "cli", gateway: try options.gatewayConfiguration())
            let session = client.session
            output.status("listening as \(Output.who(session.userID, session.deviceID)) on \(options.address(of: client)) (Ctrl-C to stop)")
            let exitCode = await LiveSession(client, output).run { _ in true }
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
            `imcli listen` as the same user is not taken over). Ctrl-C logs out and
            exits 0.
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
            let client = try await options.connect(defaultDevice: "cli-presence", gateway: try options.gatewayConfiguration())
            do {
                try await client.watchPresence(users)
            } catch {
                await options.end(client)
                throw error
            }
            output.status("watching \(users.joined(separator: ", ")) (Ctrl-C to stop)")
            let exitCode = await LiveSession(client, output).run { event in
                if case .presence = event { true } else { false }
            }
            if exitCode != 0 { throw ExitCode(exitCode) }
        }
    }
}
