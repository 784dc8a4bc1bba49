import ArgumentParser
import Foundation
import IMGatewayAPI

/// `imcli admin group create|add|remove|members|send`: groups through the server API.
struct AdminGroup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "group",
        abstract: "Create a group, add or remove a member, list the members, send to every member.",
        discussion: """
              imcli admin group create team alice bob
              imcli admin group add team carol
              imcli admin group remove team bob
              imcli admin group members team
              imcli admin group send team --from alice "standup in 5"
            """,
        subcommands: [Create.self, Add.self, Remove.self, Members.self, Send.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a group with its first members (refused if it has members).")

        @OptionGroup var options: AdminOptions
        @Argument(help: "The group.") var group: String
        @Argument(help: "Its first members.") var members: [String]

        func validate() throws {
            guard !members.isEmpty else { throw ValidationError("name at least one member") }
        }

        func run() async throws {
            try await options.run { client, output in
                switch try await client.createGroup(path: .init(group: group), body: .json(.init(members: members))) {
                case .created(let created):
                    let made = try created.body.json
                    if options.json { return try printJSON(made, output) }
                    output.line("created \(made.group): \(made.members.map(\.user).joined(separator: ", "))")
                case .badRequest(let answer): throw CLIFailure(api: 400, try answer.body.json)
                case .unauthorized(let answer): throw CLIFailure(api: 401, try answer.body.json)
                case .notFound(let answer): throw CLIFailure(api: 404, try answer.body.json)
                case .conflict(let answer): throw CLIFailure(api: 409, try answer.body.json)
                case .contentTooLarge(let answer): throw CLIFailure(api: 413, try answer.body.json)
                case .unsupportedMediaType(let answer): throw CLIFailure(api: 415, try answer.body.json)
                case .serviceUnavailable(let answer): throw CLIFailure(api: 503, try answer.body.json)
                case .undocumented(let status, _): throw CLIFailure.undocumented(status)
                }
            }
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add a member (creating the group).")

        @OptionGroup var options: AdminOptions
        @Argument(help: "The group.") var group: String
        @Argument(help: "The user.") var user: String

        func run() async throws {
            try await options.run { client, output in
                switch try await client.addGroupMember(path: .init(group: group, user: user)) {
                case .ok(let ok):
                    let member = try ok.body.json
                    if options.json { return try printJSON(member, output) }
                    output.line("\(member.user) \(member.added ? "added to" : "was already in") \(member.group)")
                case .badRequest(let answer): throw CLIFailure(api: 400, try answer.body.json)
                case .unauthorized(let answer): throw CLIFailure(api: 401, try answer.body.json)
                case .notFound(let answer): throw CLIFailure(api: 404, try answer.body.json)
                case .conflict(let answer): throw CLIFailure(api: 409, try answer.body.json)
                case .serviceUnavailable(let answer): throw CLIFailure(api: 503, try answer.body.json)
                case .undocumented(let status, _): throw CLIFailure.undocumented(status)
                }
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove a member.")

        @OptionGroup var options: AdminOptions
        @Argument(help: "The group.") var group: String
        @Argument(help: "The user.") var user: String

        func run() async throws {
            try await options.run { client, output in
                switch try await client.removeGroupMember(path: .init(group: group, user: user)) {
                case .ok(let ok):
                    let removal = try ok.body.json
                    if options.json { return try printJSON(removal, output) }
                    output.line("\(removal.user) \(removal.removed ? "removed from" : "was not in") \(removal.group)")
                case .badRequest(let answer): throw CLIFailure(api: 400, try answer.body.json)
                case .unauthorized(let answer): throw CLIFailure(api: 401, try answer.body.json)
                case .notFound(let answer): throw CLIFailure(api: 404, try answer.body.json)
                case .serviceUnavailable(let answer): throw CLIFailure(api: 503, try answer.body.json)
                case .undocumented(let status, _): throw CLIFailure.undocumented(status)
                }
            }
        }
    }

    struct Members: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the members and when each was added.")

        @OptionGroup var options: AdminOptions
        @Argument(help: "The group.") var group: String

        func run() async throws {
            try await options.run { client, output in
                switch try await client.listGroupMembers(path: .init(group: group)) {
                case .ok(let ok):
                    let listed = try ok.body.json
                    if options.json { return try printJSON(listed, output) }
                    output.line("\(listed.group): \(listed.members.count) member\(listed.members.count == 1 ? "" : "s")")
                    for member in listed.members { output.line("  \(member.user) since \(Output.time(UInt64(member.since)))") }
                case .badRequest(let answer): throw CLIFailure(api: 400, try answer.body.json)
                case .unauthorized(let answer): throw CLIFailure(api: 401, try answer.body.json)
                case .notFound(let answer): throw CLIFailure(api: 404, try answer.body.json)
                case .serviceUnavailable(let answer): throw CLIFailure(api: 503, try answer.body.json)
                case .undocumented(let status, _): throw CLIFailure.undocumented(status)
                }
            }
        }
    }

    struct Send: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Send a text message to every member, as --from (a member) or as the system.")

        @OptionGroup var options: AdminOptions
        @Argument(help: "The group.") var group: String
        @Option(help: ArgumentHelp("Send as this member (default: the system sender).", valueName: "USER")) var from: String?
        @Option(help: ArgumentHelp("The message id (default: a new UUID).", valueName: "ID")) var id: String?
        @Argument(help: "The text.") var text: String

        func run() async throws {
            try await options.run { client, output in
                let id = self.id ?? UUID().uuidString.lowercased()
                switch try await client.sendGroupMessage(path: .init(group: group), body: .json(.init(id: id, from: from, text: text))) {
                case .accepted(let accepted):
                    let sent = try accepted.body.json
                    if options.json { return try printJSON(sent, output) }
                    output.line("sent \(sent.id) to \(sent.group) as \(sent.from): \(sent._repeat ? "a repeat, sent once" : "\(sent.members) copies")")
                case .badRequest(let answer): throw CLIFailure(api: 400, try answer.body.json)
                case .unauthorized(let answer): throw CLIFailure(api: 401, try answer.body.json)
                case .forbidden(let answer): throw CLIFailure(api: 403, try answer.body.json)
                case .notFound(let answer): throw CLIFailure(api: 404, try answer.body.json)
                case .conflict(let answer): throw CLIFailure(api: 409, try answer.body.json)
                case .contentTooLarge(let answer): throw CLIFailure(api: 413, try answer.body.json)
                case .unsupportedMediaType(let answer): throw CLIFailure(api: 415, try answer.body.json)
                case .serviceUnavailable(let answer): throw CLIFailure(api: 503, try answer.body.json)
                case .undocumented(let status, _): throw CLIFailure.undocumented(status)
                }
            }
        }
    }
}
