import ArgumentParser

/// Where the broker and the gateway run; by default imbench starts both.
struct EnvironmentOptions: ParsableArguments {
    @Option(help: "Use this MQTT broker (HOST:PORT) instead of starting a mosquitto.")
    var broker: HostPort?

    @Option(help: "Use this running imgw (HOST:PORT) instead of starting one; needs --secret and --broker (the broker it uses).")
    var gateway: HostPort?

    @Option(help: "The JWT secret of the gateway given with --gateway.")
    var secret: String?

    @Option(help: "The imgw executable to start (default: the imgw next to imbench).")
    var imgw: String?

    @Flag(help: "Copy what mosquitto and imgw print to stderr.")
    var verbose = false

    func validate() throws {
        if gateway != nil && secret == nil {
            throw ValidationError("--gateway needs --secret (the gateway's auth.jwt_secret) to mint login tokens")
        }
        if gateway != nil && broker == nil {
            throw ValidationError("--gateway needs --broker: the broker that gateway uses (the direct path runs there)")
        }
        if secret != nil && gateway == nil {
            throw ValidationError("--secret is only used with --gateway")
        }
    }
}
