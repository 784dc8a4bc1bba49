import ArgumentParser
import IMClient

/// `imcli sub FILTER...`: print what is published on generic topics.
struct Subscribe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sub",
        abstract: "Subscribe to topics and print one line per publication (topic, then the message).",
        discussion: """
            Filters are put in the gateway's pub/sub space like `imcli pub` topics:
            `news` is im/t/news, `rooms/+/chat` is im/t/rooms/+/chat, `#` is
            everything in im/t/. Each filter's result is reported on stderr (with
            --json also as a `subscribed` or `refused` line); if the gateway refuses
            every filter, the command exits 2. Then one line per publication:
              im/t/news hello
            With --json: topic, text (or payload_base64 if it is not UTF-8), qos,
            retain, server_time.

            Logs in as device cli-sub unless --device is given. Subscriptions
            survive a reconnect. Ctrl-C logs out and exits 0.
            """)

    @OptionGroup var options: ClientOptions

    @Option(help: "Maximum QoS of the deliveries: 0, 1 or 2 (at most the gateway's pubsub.max_qos).")
    var qos: Int = 1

    @Argument(help: "Topic filters (MQTT wildcards + and # allowed).")
    var filters: [String] = []

    func validate() throws {
        guard !filters.isEmpty else { throw ValidationError("name at least one topic filter") }
        guard (0...2).contains(qos) else { throw ValidationError("--qos must be 0, 1 or 2") }
    }

    func run() async throws {
        let output = options.output
        try await reportingFailures(output, timeout: options.timeout) {
            let gateway = try options.gatewayConfiguration()
            let filters = self.filters.map(gateway.topics.fullName)
            let client = try await options.connect(defaultDevice: "cli-sub", gateway: gateway)
            let results: [SubscriptionResult]
            do {
                results = try await client.subscribe(filters, qos: IMQoS(rawValue: UInt8(qos))!)
            } catch {
                await options.end(client)
                throw error
            }
            for result in results { output.subscription(result, root: gateway.topics.pubsubRoot) }
            let granted = results.filter { if case .granted = $0.outcome { true } else { false } }
            guard !granted.isEmpty else {
                await options.end(client)
                let code = results.lazy.compactMap { if case .refused(let code) = $0.outcome { code } else { nil } }.first
                throw CLIFailure(message: "the gateway refused every filter", exitCode: CLIFailure.refused, kind: "refused", code: code)
            }
            output.status("receiving publications as \(Output.who(client.session.userID, client.session.deviceID)) on \(options.address(of: client)) (Ctrl-C to stop)")
            let exitCode = await LiveSession(client, output).run { event in
                if case .publication = event { true } else { false }
            }
            if exitCode != 0 { throw ExitCode(exitCode) }
        }
    }
}
