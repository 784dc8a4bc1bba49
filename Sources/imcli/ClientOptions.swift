import ArgumentParser
import Foundation
import IMClient
import IMGatewayConfig

/// Options every connecting command shares: who to log in as, where, and how to print.
struct ClientOptions: ParsableArguments {
    @Option(name: .customLong("as"), help: ArgumentHelp(
        "Log in as USER with a development token minted from the configuration's auth.jwt_secret.", valueName: "USER"))
    var user: String?

    @Option(help: ArgumentHelp("Log in with this token (an HS256 JWT whose sub is the user id).", valueName: "TOKEN"))
    var token: String?

    @Option(help: ArgumentHelp(
        "Device id (default: one per command, so they do not take each other over: cli for listen, cli-send, cli-presence, cli-location, cli-location-watch, cli-pub, cli-sub).",
        valueName: "D"))
    var device: String?

    @Option(help: "Gateway host (default: the configuration's listen.host, 127.0.0.1).")
    var host: String?

    @Option(help: "Gateway port (default: the configuration's listen.port, 6969).")
    var port: Int?

    @Flag(help: "Connect with TLS, to a gateway whose listener has listen.tls; the certificate is verified.")
    var tls = false

    @Option(help: ArgumentHelp("With --tls: trust the CA certificates in FILE (PEM) instead of the system's, for a private CA.", valueName: "FILE"))
    var ca: String?

    @Option(help: ArgumentHelp("With --tls: the name the gateway's certificate must carry (default: the host).", valueName: "NAME"))
    var serverName: String?

    @Option(name: .shortAndLong, help: ArgumentHelp(
        "Gateway configuration file (YAML), for its secret, address and policies. Default: $IMGW_CONFIG, else run/imgw.yaml if there is one, else built-in defaults.",
        valueName: "FILE"))
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
        if !tls, ca != nil || serverName != nil { throw ValidationError("--ca and --server-name apply to TLS: add --tls") }
    }

    var output: Output { Output(json: json) }

    /// The gateway configuration of --config (or the default path), or the built-in defaults.
    func gatewayConfiguration() throws -> GatewayConfiguration {
        try loadGatewayConfiguration(config)
    }

    /// Connects and logs in as the command's device: `defaultDevice` unless --device.
    func connect(defaultDevice: String, gateway: GatewayConfiguration) async throws -> IMClient {
        let configuration = try await clientConfiguration(defaultDevice: defaultDevice, gateway: gateway)
        let result = await Result { () async throws(IMClientError) in try await IMClient.connect(configuration) }
        switch result {
        case .success(let client):
            return client
        case .failure(let error) where error == .disconnected || error.isProtocolViolation:
            // Closed before LOGIN_OK without an ERROR, or bytes that are no frame (a TLS
            // alert): typically TLS on one side only.
            let what = error == .disconnected ? "the gateway closed the connection before logging in" : "the gateway's answer is not the TLV protocol (\(error))"
            let hint = tls
                ? "is it listening with TLS, and is its certificate trusted (--ca FILE) and valid for \(configuration.tlsServerName ?? configuration.host) (--server-name NAME)?"
                : "if its listener uses TLS (listen.tls), add --tls"
            throw CLIFailure(message: "\(what) (\(hint))", exitCode: CLIFailure.connection, kind: "connection")
        case .failure(let error) where error.isTLSFailure:
            let hint = "is its certificate trusted (--ca FILE) and valid for \(configuration.tlsServerName ?? configuration.host) (--server-name NAME)?"
            throw CLIFailure(message: "\(error) (\(hint))", exitCode: CLIFailure.connection, kind: "connection")
        case .failure(let error):
            throw error
        }
    }

    /// The client configuration: address from the options or the gateway configuration,
    /// token given or minted for --as, TLS with --tls.
    func clientConfiguration(defaultDevice: String, gateway: GatewayConfiguration) async throws -> IMClient.Configuration {
        let token: String
        if let given = self.token {
            token = given
        } else {
            token = try await mintToken(user: user!, device: nil, validFor: 3600, configuration: gateway)
        }
        if gateway.listen.tls != nil, !tls {
            output.status("warning: the configuration's listener is TLS-only (listen.tls): add --tls (and --ca FILE for a private CA)")
        }
        var configuration = IMClient.Configuration(
            host: host ?? Self.connectable(gateway.listen.host), port: port ?? gateway.listen.port,
            token: token, deviceID: device ?? defaultDevice)
        configuration.tls = try tlsConfiguration()
        configuration.tlsServerName = serverName
        configuration.ackTimeout = .milliseconds(Int64(timeout * 1000))
        configuration.connectTimeout = configuration.ackTimeout
        // `send` and `pub` wait at most --timeout for their ACK, reconnects included.
        configuration.sendTimeout = configuration.ackTimeout
        return configuration
    }

    /// Whether the device id is the command's own default (the command may then log out).
    var usesDefaultDevice: Bool { device == nil }

    /// Ends a one-shot command's connection: the command's own device is logged out (its
    /// session keeps no queue); a --device is only disconnected, keeping its session.
    func end(_ client: IMClient) async {
        if usesDefaultDevice { await client.logout() } else { await client.close() }
    }

    /// Logs in as `defaultDevice` (unless --device), runs `request` once, and ends the
    /// session: logged out (or closed, with --device) after an answer, closed after a lost
    /// connection, when the gateway may not answer a LOGOUT either. Returns what `request`
    /// returned, or throws its error.
    func once<T: Sendable>(defaultDevice: String, _ request: (IMClient) async throws(IMClientError) -> T) async throws -> T {
        let client = try await connect(defaultDevice: defaultDevice, gateway: try gatewayConfiguration())
        let result = await Result { () async throws(IMClientError) -> T in try await request(client) }
        switch result {
        case .success, .failure(.refused): await end(client)
        case .failure: await client.close()
        }
        return try result.get()
    }

    /// `where` for status lines: `127.0.0.1:6969`, with TLS marked.
    func address(of client: IMClient) -> String {
        "\(client.configuration.host):\(client.configuration.port)\(tls ? " (TLS)" : "")"
    }

    /// A wildcard listen address means this machine.
    static func connectable(_ host: String) -> String {
        switch host {
        case "0.0.0.0", "": "127.0.0.1"
        case "::", "[::]": "::1"
        default: host
        }
    }
}

/// Where the configuration is when `--config` is not given: `$IMGW_CONFIG`, else
/// `run/imgw.yaml` in the current directory if there is one (what `make run` writes), else
/// none (the built-in defaults).
func defaultConfigurationPath() -> String? {
    if let path = ProcessInfo.processInfo.environment["IMGW_CONFIG"], !path.isEmpty { return path }
    return FileManager.default.fileExists(atPath: "run/imgw.yaml") ? "run/imgw.yaml" : nil
}

/// The gateway configuration at `path` (or ``defaultConfigurationPath()``), or the built-in
/// defaults.
func loadGatewayConfiguration(_ path: String?) throws -> GatewayConfiguration {
    guard let path = path ?? defaultConfigurationPath() else { return .defaults }
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

extension IMClientError {
    var isProtocolViolation: Bool {
        if case .protocolViolation = self { true } else { false }
    }

    var isTLSFailure: Bool {
        if case .tlsFailed = self { true } else { false }
    }
}
