import ArgumentParser
import IMClient

/// `imcli group send|listen`: group chat (PROTOCOL.md 6.11). The app's backend sets the
/// members (`imcli admin group ...` or the server API).
struct GroupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "group",
        abstract: "Send to a group, or listen to one.",
        subcommands: [GroupSend.self, GroupListen.self])
}

/// `imcli group send --group G TEXT...`: one message to every member, ACKed.
struct GroupSend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Send a text message to every member of a group; exit 0 once the gateway has ACKed it.",
        discussion: """
            Refused (exit 2, FORBIDDEN) unless the user is a member. Logs in as device
            cli-send unless --device is given, like `imcli send`.
            """)

    @OptionGroup var options: ClientOptions

    @Option(help: ArgumentHelp("The group's id.", valueName: "GROUP"))
    var group: String

    @Option(help: ArgumentHelp("The message id (default: a new UUID).", valueName: "ID"))
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
                try await client.send(toGroup: group, text: text.joined(separator: " "), messageID: id ?? IMClient.makeMessageID())
            }
            output.sent(receipt, to: group)
        }
    }
}

/// `imcli group listen --group G`: a group's messages and typing, as they arrive.
struct GroupListen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "listen",
        abstract: "Print one line per message and typing state in a group, as they arrive.",
        discussion: """
            Logs in as device cli unless --device is given, like `imcli listen` (which
            shows every conversation); the group's messages queued for the device while it
            was offline arrive first. Ctrl-C logs out and exits 0.
            """)

    @OptionGroup var options: ClientOptions

    @Option(help: ArgumentHelp("The group's id.", valueName: "GROUP"))
    var group: String

    func run() async throws {
        let output = options.output
        try await reportingFailures(output, timeout: options.timeout) {
            let client = try await options.connect(defaultDevice: "cli", gateway: try options.gatewayConfiguration())
            let session = client.session
            output.status("listening to \(group) as \(Output.who(session.userID, session.deviceID)) (Ctrl-C to stop)")
            let group = self.group
            let exitCode = await LiveSession(client, output).run { event in
                switch event {
                case .message(let message): message.group == group
                case .typing(let typing): typing.group == group
                default: false
                }
            }
            if exitCode != 0 { throw ExitCode(exitCode) }
        }
    }
}

/// `imcli typing --to USER | --group G [STATE]`: one typing state.
struct TypingCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "typing",
        abstract: "Tell a user, or a group's members, what you are doing in the conversation.",
        discussion: """
            STATE is typing (the default), stopped, recording or away. It reaches their
            online devices only and holds for 10 s. Logs in as device cli-send unless
            --device is given.
            """)

    @OptionGroup var options: ClientOptions

    @Option(help: ArgumentHelp("The user.", valueName: "USER"))
    var to: String?

    @Option(help: ArgumentHelp("The group.", valueName: "GROUP"))
    var group: String?

    @Argument(help: "typing, stopped, recording or away.")
    var state: String = "typing"

    func validate() throws {
        guard (to == nil) != (group == nil) else { throw ValidationError("give --to USER or --group GROUP, one of them") }
        guard Output.typingNames.contains(state) else {
            throw ValidationError("unknown state \(state.debugDescription): one of \(Output.typingNames.joined(separator: ", "))")
        }
    }

    func run() async throws {
        let output = options.output
        let typing = TypingState(rawValue: UInt8(Output.typingNames.firstIndex(of: state) ?? 1)) ?? .typing
        try await reportingFailures(output, timeout: options.timeout) {
            try await options.once(defaultDevice: "cli-send") { client throws(IMClientError) in
                if let group { try await client.sendTyping(typing, inGroup: group) } else { try await client.sendTyping(typing, to: to ?? "") }
            }
            output.status("\(state) sent to \(group ?? to ?? "")")
        }
    }
}
