import ArgumentParser
import Foundation
import IMClient
import IMGateway

/// Options every connecting command shares: who to log in as, where, and how to print.
struct ClientOptions: ParsableArguments {
    @Option(name: .customLong("as"), help: ArgumentHelp(
        "Log in as USER with a development token minted from the configuration's auth.jwt_secret.", valueName: "USER"))
    var user: String?

    @Option(help: ArgumentHelp("Log in with this token (an HS256 JWT whose sub is the user id).", valueName: "TOKEN"))
    var token: String?

    @Option(help: ArgumentHelp("Device id (default: cli; send and presence use cli-send and cli-presence, see their help).", valueName: "D"))
    var device: String?

    @Option(help: "Gateway host (default: the configuration's listen.host, 127.0.0.1).")
    var host: String?

    @Option(help: "Gateway port (default: the configuration's listen.port, 6969).")
    var port: Int?

    @Option(name: .shortAndLong, help: ArgumentHelp("Gateway configuration file (YAML), for its secret and address. Default: built-in defaults.", valueName: "FILE"))
    var config: String?

    @Option(help: ArgumentHelp("Seconds to wait for each answer from the gateway.", valueName: "SECONDS"))
    var timeout: Double = 10

    @Flag(help: "Print one JSON object per line.")
    var json = false

    func validate() throws {
        switch (user, token) {
        case (nil, nil): throw ValidationError("say who you are: --as USER (development token) or --token TOKEN")
        case (.some, .some): throw ValidationError("give either --as or --token, not both")
        default: break
        }
        guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
        if let port, !(1...65535).contains(port) { throw ValidationError("--port must be 1-65535") }
    }

    var output: Output { Output(json: json) }

    /// The client configuration: address from the options or the gateway configuration,
    /// token given or minted for --as.
    func clientConfiguration(defaultDevice: String) async throws -> IMClient.Configuration {
        let gateway = try loadGatewayConfiguration(config)
        let token: String
        if let given = self.token {
            token = given
        } else {
            token = try await mintToken(user: user!, device: nil, validFor: 3600, configuration: gateway)
        }
        if gateway.listen.tls != nil {
            output.status("warning: the gateway's configuration has listen.tls; imcli speaks plain TCP only")
        }
        var configuration = IMClient.Configuration(
            host: host ?? Self.connectable(gateway.listen.host), port: port ?? gateway.listen.port,
            token: token, deviceID: device ?? defaultDevice)
        configuration.ackTimeout = .milliseconds(Int64(timeout * 1000))
        configuration.connectTimeout = configuration.ackTimeout
        return configuration
    }

    /// Whether the device id is the command's own default (the command may then log out).
    var usesDefaultDevice: Bool { device == nil }

    /// A wildcard listen address means this machine.
    static func connectable(_ host: String) -> String {
        switch host {
        case "0.0.0.0", "": "127.0.0.1"
        case "::", "[::]": "::1"
        default: host
        }
    }
}

/// The gateway configuration at `path`, or the built-in defaults.
func loadGatewayConfiguration(_ path: String?) throws -> GatewayConfiguration {
    guard let path else { return .defaults }
    do {
        return try GatewayConfiguration.load(from: path)
    } catch {
        throw CLIFailure.usage("\(path): \(error)")
    }
}

/// A token for `user` signed with the configuration's secret (and issuer, if it requires one).
func mintToken(user: String, device: String?, validFor seconds: Int, configuration: GatewayConfiguration) async throws -> String {
    let minter = TokenMinter(secret: configuration.auth.jwtSecret, issuer: configuration.auth.issuer)
    do {
        return try await minter.mint(user: user, device: device, validFor: seconds)
    } catch let error as AuthError {
        throw CLIFailure.usage("\(error)")
    }
}
