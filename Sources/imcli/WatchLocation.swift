import ArgumentParser
import IMClient

/// `imcli location watch USER...`: print the positions users share with this user.
struct WatchLocation: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Print one line per position of users sharing with this user.",
        discussion: """
            Each user must be sharing with this user (`imcli location share
            --with`): one who is not is reported on stderr; if none is, the command
            exits 2. A user's last position arrives at once (the broker keeps it
            during the share), then every new one:
              [location] alice/phone 52.52,13.405
            With --json: lat, lon, tst (Unix seconds of the fix) and whichever of
            acc, alt, vel, cog, batt were sent. Logs in as device
            cli-location-watch unless --device is given. Ctrl-C logs out, exit 0.
            """)

    @OptionGroup var options: ClientOptions

    @Argument(help: "The users whose positions to print.")
    var users: [String] = []

    func validate() throws {
        guard !users.isEmpty else { throw ValidationError("name at least one user to watch") }
    }

    func run() async throws {
        let output = options.output
        try await reportingFailures(output, timeout: options.timeout) {
            let client = try await options.connect(defaultDevice: "cli-location-watch", gateway: try options.gatewayConfiguration())
            let me = client.session.userID
            var watched: [String] = []
            var refusal: IMErrorCode?
            // One watch per user: the gateway refuses a whole watch if one user is not sharing.
            for user in users {
                let result = await Result { () async throws(IMClientError) in try await client.watchLocation([user]) }
                switch result {
                case .success:
                    watched.append(user)
                    output.watching(user)
                case .failure(.refused(let code, let message)):
                    output.refused(("user", user), code, message,
                                   hint: code == .forbidden ? "is \(user) sharing with \(me)? imcli location share --as \(user) --with \(me) ..." : nil)
                    refusal = refusal ?? code
                case .failure(let error):
                    await options.end(client)
                    throw error
                }
            }
            guard !watched.isEmpty else {
                await options.end(client)
                throw CLIFailure(message: "no one to watch: every user was refused", exitCode: CLIFailure.refused, kind: "refused", code: refusal)
            }
            output.status("watching the positions of \(watched.joined(separator: ", ")) as \(Output.who(me, client.session.deviceID)) on \(options.address(of: client)) (Ctrl-C to stop)")
            let exitCode = await LiveSession(client, output).run { event in
                if case .location = event { true } else { false }
            }
            if exitCode != 0 { throw ExitCode(exitCode) }
        }
    }
}
