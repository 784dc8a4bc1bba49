import ArgumentParser
import Foundation
import IMClient

/// The conversation an option pair names: `--with USER` or `--group GROUP`, exactly one.
struct ConversationOptions: ParsableArguments {
    @Option(name: .customLong("with"), help: ArgumentHelp("The one-to-one conversation with this user.", valueName: "USER"))
    var user: String?

    @Option(help: ArgumentHelp("The group conversation.", valueName: "GROUP"))
    var group: String?

    func validate() throws {
        guard (user == nil) != (group == nil) else { throw ValidationError("name the conversation: --with USER or --group GROUP (one of them)") }
    }

    var conversation: IMConversation { user.map(IMConversation.user) ?? .group(group ?? "") }
}

/// `imcli history --as bob --with alice`: a conversation's stored messages, oldest first.
struct HistoryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "history",
        abstract: "Print a conversation's history from the gateway's archive, oldest first.",
        discussion: """
            The newest --limit messages (default 50), or --all of them, paging back. Each line
            shows the message's stream offset: --before OFFSET pages further back, --after
            OFFSET forward. Deleted messages show as [deleted].
            """)

    @OptionGroup var options: ClientOptions
    @OptionGroup var conversation: ConversationOptions

    @Option(help: ArgumentHelp("Messages older than this stream offset.", valueName: "OFFSET"))
    var before: UInt64?

    @Option(help: ArgumentHelp("Messages newer than this stream offset.", valueName: "OFFSET"))
    var after: UInt64?

    @Option(help: ArgumentHelp("At most this many (1-200).", valueName: "N"))
    var limit: UInt16 = 50

    @Flag(help: "Every stored message of the conversation, paging back from the newest.")
    var all = false

    func validate() throws {
        guard before == nil || after == nil else { throw ValidationError("--before and --after cannot be used together") }
        guard !all || (before == nil && after == nil) else { throw ValidationError("--all pages from the newest: without --before or --after") }
        guard (1...200).contains(limit) else { throw ValidationError("--limit must be 1-200") }
    }

    func run() async throws {
        let output = options.output
        let target = conversation.conversation
        let position: HistoryQuery.Position = before.map { .before($0) } ?? after.map { .after($0) } ?? .latest
        try await reportingFailures(output, timeout: options.timeout) {
            let pages = try await options.once(defaultDevice: "cli-history") { client throws(IMClientError) -> [IMClient.HistoryPage] in
                guard all else { return [try await client.history(of: target, position: position, limit: limit)] }
                var pages: [IMClient.HistoryPage] = []
                var next = HistoryQuery.Position.latest
                while true {
                    let page = try await client.history(of: target, position: next, limit: limit)
                    pages.append(page)
                    guard !page.complete, let oldest = page.messages.first?.streamOffset else { break }
                    next = .before(oldest)
                }
                return pages.reversed()
            }
            for page in pages { for message in page.messages { output.stored(message) } }
            let complete = pages.last?.complete ?? true
            if !output.json, !complete, case .after = position {
                output.status("more after this page: --after \(pages.last?.messages.last?.streamOffset ?? 0)")
            } else if !output.json, !all, pages.first?.complete == false {
                output.status("older messages: --before \(pages.first?.messages.first?.streamOffset ?? 0)")
            }
        }
    }
}

/// `imcli conversations --as bob`: the conversation list, most recent first.
struct ConversationsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "conversations",
        abstract: "Print the user's conversations, most recent first, with unread counts and the newest message.")

    @OptionGroup var options: ClientOptions

    @Option(help: ArgumentHelp("Conversations whose newest message is older than this stream offset (the next page).", valueName: "OFFSET"))
    var before: UInt64?

    @Option(help: ArgumentHelp("At most this many (1-200).", valueName: "N"))
    var limit: UInt16 = 50

    func validate() throws {
        guard (1...200).contains(limit) else { throw ValidationError("--limit must be 1-200") }
    }

    func run() async throws {
        let output = options.output
        try await reportingFailures(output, timeout: options.timeout) {
            let page = try await options.once(defaultDevice: "cli-history") { client throws(IMClientError) in
                try await client.conversations(before: before, limit: limit)
            }
            for line in page.lines { output.conversation(line) }
            if !output.json, !page.complete, let last = page.lines.last {
                output.status("older conversations: --before \(last.lastOffset)")
            }
        }
    }
}

/// `imcli read --as bob --with alice OFFSET`: a read marker.
struct ReadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "read",
        abstract: "Mark a conversation read up to a stream offset (default: its newest message).")

    @OptionGroup var options: ClientOptions
    @OptionGroup var conversation: ConversationOptions

    @Argument(help: ArgumentHelp("The stream offset read up to (as history shows it).", valueName: "OFFSET"))
    var offset: UInt64?

    func run() async throws {
        let output = options.output
        let target = conversation.conversation
        try await reportingFailures(output, timeout: options.timeout) {
            let marker = try await options.once(defaultDevice: "cli-history") { client throws(IMClientError) -> IMClient.ReadMarker in
                var through = offset
                if through == nil {
                    through = try await client.history(of: target, limit: 1).messages.last?.streamOffset
                }
                guard let through else { throw .refused(.badRequest, "no message in the conversation with \(target) to mark read") }
                return try await client.markRead(target, through: through)
            }
            output.readMarker(marker)
        }
    }
}

/// `imcli delete --as alice ID`: delete a message for everyone.
struct DeleteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete",
        abstract: "Delete a message you sent, for everyone; exit 0 once the gateway ACKed it.")

    @OptionGroup var options: ClientOptions

    @Argument(help: ArgumentHelp("The message's id.", valueName: "ID"))
    var id: String

    func run() async throws {
        let output = options.output
        try await reportingFailures(output, timeout: options.timeout) {
            let time = try await options.once(defaultDevice: "cli-send") { client throws(IMClientError) in
                try await client.delete(messageID: id)
            }
            if output.json {
                output.line([("type", "deleted"), ("id", .string(id)), ("deleted_at", .number(time))])
            } else {
                output.line("deleted \(id) for everyone")
            }
        }
    }
}
