import ArgumentParser

/// The chat workload's options, shared by `imbench chat` and `imbench mqtt` (each has its
/// own `--window`, whose default differs).
struct ChatWorkloadOptions: ParsableArguments {
    @Option(help: "Seconds each path (or API) sends, per phase (with --rounds: per round).")
    var seconds: Double

    @Option(help: "Sender → receiver pairs.")
    var pairs = 1

    @Option(help: "Total messages per second over all pairs (default: unlimited, closed loop with the window).")
    var rate: Double?

    @Option(help: "QoS of the chat messages: 1 or 2.")
    var qos = 1

    @Option(help: "Message content bytes.")
    var size = 64

    @Option(help: "Seconds to wait after sending stops for messages in flight.")
    var drain: Double = 5

    func validate() throws {
        guard seconds > 0 else { throw ValidationError("--seconds must be positive") }
        guard pairs >= 1 else { throw ValidationError("--pairs must be at least 1") }
        guard qos == 1 || qos == 2 else { throw ValidationError("--qos must be 1 or 2") }
        guard size >= 1, size <= 65536 else { throw ValidationError("--size must be 1 to 65536") }
        if let rate, rate <= 0 { throw ValidationError("--rate must be positive") }
    }

    /// The settings of a run with `window` messages in flight per sender.
    func settings(window: Int) -> ChatSettings {
        ChatSettings(seconds: seconds, pairs: pairs, rate: rate, window: window, qos: qos, size: size, drainSeconds: drain)
    }
}
