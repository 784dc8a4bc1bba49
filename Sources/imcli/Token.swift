import ArgumentParser
import IMGatewayConfig

/// `imcli token USER`: a development token.
struct Token: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a login token for USER, signed with the configuration's auth.jwt_secret.",
        discussion: "Without --config: $IMGW_CONFIG's, else run/imgw.yaml's (the secret `make run` made), else the built-in defaults' secret.")

    @Argument(help: "The user id (the token's sub claim).")
    var user: String

    @Option(help: ArgumentHelp("Bind the token to this device id (its device claim): it logs in only as that device.", valueName: "D"))
    var device: String?

    @Option(help: ArgumentHelp("How long the token is valid.", valueName: "SECONDS"))
    var validFor: Int = 86400

    @Option(name: .shortAndLong, help: ArgumentHelp("Gateway configuration file (YAML). Default: $IMGW_CONFIG, else run/imgw.yaml if there is one, else built-in defaults.", valueName: "FILE"))
    var config: String?

    @Flag(help: "Print a JSON object instead of the bare token.")
    var json = false

    func validate() throws {
        guard validFor > 0 else { throw ValidationError("--valid-for must be positive") }
    }

    func run() async throws {
        let output = Output(json: json)
        try await reportingFailures(output, timeout: 0) {
            let configuration = try loadGatewayConfiguration(config)
            output.token(try await mintToken(user: user, device: device, validFor: validFor, configuration: configuration))
        }
    }
}
