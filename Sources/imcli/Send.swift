import ArgumentParser
import IMClient

/// `imcli send --to USER TEXT...`: one chat message, ACKed.
struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send a text message; exit 0 once the gateway has ACKed it.",
        discussion: """
            Logs in as device cli-send unless --device is given, so that a running
            `imcli listen` as the same user (device cli) is not taken over, and logs that
            device out when done (its session keeps no queue). With --device D it only
            disconnects, keeping D's session.
            """)

    @OptionGroup var options: ClientOptions

    @Option(help: ArgumentHelp("The recipient's user id.", valueName: "USER"))
    var to: String

    @Option(help: ArgumentHelp("The message id (default: a new UUID). Sending again with the same id delivers the message once.", valueName: "ID"))
    var id: String?

    @Argument(help: "The text; several words are joined with spaces.")
    var text: [String]

    func validate() throws {
        guard !text.isEmpty else { throw ValidationError("nothing to send: give the text after the options") }
    }

    func run() async throws {
        let output = options.output
        try await reportingFailures(output, timeout: options.timeout) {
            let receipt = try await options.once(defaultDevice: "cli-send") { client throws(IMClientError) in
                try await client.send(to: to, text: text.joined(separator: " "), messageID: id ?? IMClient.makeMessageID())
            }
            output.sent(receipt, to: to)
        }
    }
}
