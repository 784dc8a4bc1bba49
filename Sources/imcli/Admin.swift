import ArgumentParser
import AsyncHTTPClient
import Foundation
import HTTPTypes
import IMGatewayConfig
import IMGatewayAPI
import OpenAPIAsyncHTTPClient
import OpenAPIRuntime

/// `imcli admin ...`: the gateway's server API (docs/openapi.yaml) from a shell, with an API key.
struct Admin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Call the gateway's server API with an API key: send as a user or the system, look up presence, disconnect, groups.",
        discussion: """
            The key comes from --key or, better (it stays out of the process list and the shell's
            history), the IMGW_API_KEY environment variable, else the configuration's first
            api.keys entry. The API's address is --url, else the configuration's
            api.host:api.port. The configuration is --config FILE, else $IMGW_CONFIG, else
            run/imgw.yaml (what make run writes) if it is there, else the built-in defaults
            (127.0.0.1:9470, no key).
              imcli admin send --to bob --id welcome-1 "Welcome!"
              imcli admin presence bob
              imcli admin disconnect bob --device phone --reason "lost phone"
              imcli admin disconnect bob --revoke --reason "password changed"
              imcli admin group create team alice bob      (and add, remove, members, send)
            Exit codes: 0 done, 1 usage, 2 refused (the API's 4xx: the code it names is shown),
            3 cannot reach the API or it failed (5xx), 4 no answer in time.
            """,
        subcommands: [AdminSend.self, AdminPresence.self, AdminDisconnect.self, AdminGroup.self])
}

/// What every `imcli admin` command takes.
struct AdminOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The API key (default: $IMGW_API_KEY, else the configuration's first api.keys entry).", valueName: "KEY"))
    var key: String?

    @Option(help: ArgumentHelp("The API's base URL (default: http://api.host:api.port of the configuration).", valueName: "URL"))
    var url: String?

    @Option(name: .shortAndLong, help: ArgumentHelp(
        "Gateway configuration file (YAML), for api.host, api.port and api.keys (default: $IMGW_CONFIG, else run/imgw.yaml if there is one).",
        valueName: "FILE"))
    var config: String?

    @Option(help: ArgumentHelp("Seconds to wait for the answer.", valueName: "SECONDS"))
    var timeout: Double = 10

    @Flag(help: "Print the API's JSON answer instead of a sentence.")
    var json = false

    /// The generated client for the API over `http`, with the key as bearer token.
    func client(over http: HTTPClient) throws -> Client {
        let api = try loadGatewayConfiguration(config).api
        let environment = ProcessInfo.processInfo.environment["IMGW_API_KEY"].flatMap { $0.isEmpty ? nil : $0 }
        guard let key = key ?? environment ?? api.keys.first?.key, !key.isEmpty else {
            throw CLIFailure.usage(
                "no API key: pass --key, set IMGW_API_KEY (one of the gateway's api.keys), or give the gateway's configuration (--config FILE) with api.keys")
        }
        let base = url ?? "http://\(api.host.contains(":") ? "[\(api.host)]" : api.host):\(api.port)"
        guard let serverURL = URL(string: base), serverURL.scheme == "http" || serverURL.scheme == "https" else {
            throw CLIFailure.usage("--url \(base) is not an http(s) URL")
        }
        let transport = AsyncHTTPClientTransport(configuration: .init(client: http, timeout: .milliseconds(Int64(timeout * 1000))))
        return Client(serverURL: serverURL, transport: transport, middlewares: [BearerKey(key: key)])
    }

    /// Runs `body`, turning what can go wrong on the way into the exit codes of `imcli admin --help`.
    func run(_ body: (Client, Output) async throws -> Void) async throws {
        let output = Output(json: json)
        // Its own HTTP client: AsyncHTTPClient retries a refused connection until the connect
        // timeout, which is kept short (the API is on loopback or a LAN).
        var configuration = HTTPClient.Configuration()
        configuration.timeout = .init(connect: .milliseconds(Int64(min(timeout, 2) * 1000)), read: .milliseconds(Int64(timeout * 1000)))
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        do {
            try await reportingFailures(output, timeout: timeout) {
                let client = try client(over: http)
                do {
                    try await body(client, output)
                } catch let failure as CLIFailure {
                    throw failure
                } catch let error as ClientError {
                    let cause = error.underlyingError
                    if let timedOut = cause as? HTTPClientError, [.deadlineExceeded, .readTimeout].contains(timedOut) {
                        throw CLIFailure(message: "no answer from the API within \(Output.seconds(timeout))", exitCode: CLIFailure.timeout, kind: "timeout")
                    }
                    throw CLIFailure(
                        message: "cannot reach the server API at \(error.baseURL?.absoluteString ?? "?"): \(cause) (is api.keys set, and imgw running?)",
                        exitCode: CLIFailure.connection, kind: "connection")
                }
            }
        } catch {
            try? await http.shutdown()
            throw error
        }
        try await http.shutdown()
    }
}

extension CLIFailure {
    /// The API refused the request (4xx) or failed (5xx): its error code and message.
    init(api status: Int, _ error: Components.Schemas.ErrorResponse) {
        let refused = status < 500
        self.init(
            message: "the server API answered \(status) \(error.error): \(error.message)",
            exitCode: refused ? CLIFailure.refused : CLIFailure.connection, kind: refused ? "refused" : "connection")
    }

    /// An answer the document does not list.
    static func undocumented(_ status: Int) -> CLIFailure {
        CLIFailure(message: "the server API answered \(status), which docs/openapi.yaml does not list", exitCode: connection, kind: "connection")
    }
}

/// Prints `value` (a generated response type) as the API's JSON.
func printJSON(_ value: some Encodable, _ output: Output) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    output.line(String(decoding: try encoder.encode(value), as: UTF8.self))
}

struct AdminSend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send", abstract: "Send a text message to a user, as --from or as the system (api.system_sender).")

    @OptionGroup var options: AdminOptions

    @Option(help: ArgumentHelp("The recipient.", valueName: "USER"))
    var to: String

    @Option(help: ArgumentHelp("Send as this user (default: the system sender).", valueName: "USER"))
    var from: String?

    @Option(help: ArgumentHelp("The message id; repeating it with the same text sends nothing twice (default: a new UUID).", valueName: "ID"))
    var id: String?

    @Argument(help: "The text.")
    var text: String

    func run() async throws {
        try await options.run { client, output in
            let id = self.id ?? UUID().uuidString.lowercased()
            switch try await client.sendMessage(path: .init(user: to), body: .json(.init(id: id, from: from, text: text))) {
            case .accepted(let accepted):
                let sent = try accepted.body.json
                if options.json { return try printJSON(sent, output) }
                output.line("sent \(sent.id) to \(sent.to) as \(sent.from)\(sent._repeat ? " (a repeat: sent once)" : "") (server time \(Output.time(UInt64(sent.serverTime))))")
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

struct AdminPresence: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "presence", abstract: "A user's devices, online or offline, on every gateway.")

    @OptionGroup var options: AdminOptions

    @Argument(help: "The user.")
    var user: String

    func run() async throws {
        try await options.run { client, output in
            switch try await client.getPresence(path: .init(user: user)) {
            case .ok(let ok):
                let presence = try ok.body.json
                if options.json { return try printJSON(presence, output) }
                output.line("\(presence.user): \(presence.online ? "online" : "offline")\(presence.lastSeen.map { ", last change \(Output.time(UInt64($0)))" } ?? "")")
                for device in presence.devices {
                    output.line("  \(device.device) \(device.status.rawValue) since \(Output.time(UInt64(device.since)))\(device.gateway.map { " on \($0)" } ?? "")")
                }
            case .badRequest(let answer): throw CLIFailure(api: 400, try answer.body.json)
            case .unauthorized(let answer): throw CLIFailure(api: 401, try answer.body.json)
            case .notFound(let answer): throw CLIFailure(api: 404, try answer.body.json)
            case .serviceUnavailable(let answer): throw CLIFailure(api: 503, try answer.body.json)
            case .undocumented(let status, _): throw CLIFailure.undocumented(status)
            }
        }
    }
}

struct AdminDisconnect: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "disconnect",
        abstract: "End a user's sessions (or one device's) on every gateway; --revoke also refuses their tokens issued so far.")

    @OptionGroup var options: AdminOptions

    @Argument(help: "The user.")
    var user: String

    @Option(help: ArgumentHelp("Only this device.", valueName: "D"))
    var device: String?

    @Option(help: ArgumentHelp("The reason, for the devices' KICK message.", valueName: "TEXT"))
    var reason: String?

    @Flag(help: "Also refuse every token of the user issued before now (a new one works).")
    var revoke = false

    func run() async throws {
        try await options.run { client, output in
            let request = Components.Schemas.DisconnectRequest(device: device, reason: reason, revokeTokens: revoke)
            switch try await client.disconnectUser(path: .init(user: user), body: .json(request)) {
            case .accepted(let accepted):
                let done = try accepted.body.json
                if options.json { return try printJSON(done, output) }
                let whom = done.device.map { "\(done.user)/\($0)" } ?? "every device of \(done.user)"
                let revoked = done.revokedBefore.map { "; tokens issued before \(Output.time(UInt64($0) * 1000)) are refused" } ?? ""
                output.line("disconnecting \(whom) (\(done.reason))\(revoked)")
            case .badRequest(let answer): throw CLIFailure(api: 400, try answer.body.json)
            case .unauthorized(let answer): throw CLIFailure(api: 401, try answer.body.json)
            case .notFound(let answer): throw CLIFailure(api: 404, try answer.body.json)
            case .contentTooLarge(let answer): throw CLIFailure(api: 413, try answer.body.json)
            case .unsupportedMediaType(let answer): throw CLIFailure(api: 415, try answer.body.json)
            case .serviceUnavailable(let answer): throw CLIFailure(api: 503, try answer.body.json)
            case .undocumented(let status, _): throw CLIFailure.undocumented(status)
            }
        }
    }
}
