import ArgumentParser

/// `imbench`: measures the gateway against the direct MQTT path, on this machine, in one run.
///
/// - `imbench wire`: the TLV codec alone (frames/s and MB/s, encode and decode).
/// - `imbench chat`: chat pairs through `imgw` (TLV → gateway → broker → gateway → TLV),
///   then the same workload straight through the broker with raw libmosquitto (MQTT →
///   broker → MQTT).
/// - `imbench mqtt`: the `Mosquitto` wrapper's APIs against raw libmosquitto on that workload.
/// - `imbench connect`: many users logged in at once: logins/s, memory, descriptors and
///   idle CPU of the gateway process.
/// - `imbench weak`: chat through a fault-injecting proxy (latency, stalls, cuts): delivered
///   %, duplicates, order, reconnect times.
/// - `imbench archive`: the message archive alone: messages/s, CPU and bytes per message.
/// - `imbench rocksdb`: the archive's lean records written through RocksDB's C API (one writer,
///   write batches): messages/s, CPU and bytes per message, catch-up and history reads.
/// - `imbench catchup`: a device catching up at login on what it missed (from the archive).
/// - `imbench group`: group fan-out (groups of N, some members offline) through `imgw`, beside
///   raw libmosquitto publishing per member and the broker fanning out.
///
/// `chat`, `connect` and `group` start their own mosquitto and `imgw` (the binary next to this one)
/// on free loopback ports unless told where they run, and stop them on exit and on SIGINT.
/// Results: progress on stderr, one JSON line on stdout.
@main
struct IMBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "imbench",
        abstract: "Benchmarks for the IM gateway: codec, chat throughput and latency, connections.",
        discussion: "Progress goes to stderr; each subcommand prints one JSON line with its results on stdout.",
        subcommands: [
            WireCommand.self, ChatCommand.self, MQTTCommand.self, ConnectCommand.self, WeakCommand.self, GroupCommand.self,
            ArchiveCommand.self, CatchUpCommand.self, HistoryCommand.self, RocksDBCommand.self, ChaosCommand.self,
        ])
}
