import ArgumentParser
import IMClient

/// `imcli pub TOPIC MESSAGE...`: one publication on a generic topic, ACKed.
struct Publish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pub",
        abstract: "Publish a message on a topic; exit 0 once the gateway has ACKed it.",
        discussion: """
            Topics live in the gateway's pub/sub space (pubsub.* in imgw.yaml, im/t/
            by default). A TOPIC that does not start with the topic prefix (im/) is
            put in it: `news` is im/t/news; `im/t/news` is taken as it is. The
            message is sent as UTF-8 (several words joined with spaces; "" for an
            empty one).

            QoS 1 (the default) and 2 are ACKed once the broker has the message,
            QoS 0 once the gateway passed it on. A topic outside the space, a
            wildcard in it, or a publish the gateway's policy forbids exits 2.

            Logs in as device cli-pub unless --device is given, and logs it out.
            """)

    @OptionGroup var options: ClientOptions

    @Option(help: "QoS 0, 1 or 2 (at most the gateway's pubsub.max_qos).")
    var qos: Int = 1

    @Flag(help: "Keep it as the topic's retained message (an empty message clears it).")
    var retain = false

    @Argument(help: "The topic: news for im/t/news, or a full topic.")
    var topic: String

    @Argument(help: "The message; several words are joined with spaces.")
    var message: [String] = []

    func validate() throws {
        guard !message.isEmpty else { throw ValidationError(#"nothing to publish: give the message after the topic ("" for an empty one)"#) }
        guard (0...2).contains(qos) else { throw ValidationError("--qos must be 0, 1 or 2") }
    }

    func run() async throws {
        let output = options.output
        try await reportingFailures(output, timeout: options.timeout) {
            let gateway = try options.gatewayConfiguration()
            let topic = gateway.topics.fullName(self.topic)
            let payload = Array(message.joined(separator: " ").utf8)
            let qos = IMQoS(rawValue: UInt8(qos))!
            let client = try await options.connect(defaultDevice: "cli-pub", gateway: gateway)
            let result = await Result { () async throws(IMClientError) in
                try await client.publish(topic: topic, payload: payload, qos: qos, retain: retain)
            }
            switch result {
            case .success, .failure(.refused):
                await options.end(client)
            case .failure:
                // Lost or silent: the gateway may not answer a LOGOUT either.
                await client.close()
            }
            if case .failure(.refused(let code, let message)) = result {
                throw CLIFailure(refused: topic, code, message, hint: Output.topicHint(code, root: gateway.topics.pubsubRoot, filter: false))
            }
            try result.get()
            output.published(topic: topic, bytes: payload.count, qos: qos, retain: retain)
        }
    }
}
