import ArgumentParser
import Foundation
import IMClient
import IMGateway
import Mosquitto

/// `imbench catchup`: a device catching up at login. The device logs in once and leaves;
/// `messages` chats are sent to it and ACKed; then it logs in again (IMClient) and the time
/// from the start of its connect to the last of those messages, and to the end of the
/// catch-up (the SYNC's ACK), is measured. With `--lost-queue` the broker's session of the
/// device is wiped first (what a broker that died, or a queue that overflowed, leaves): every
/// message then comes from the archive alone; otherwise the broker's queue and the archive both
/// hold them, and the gateway drops the broker's copies.
struct CatchUpCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "catchup",
        abstract: "A device catching up at login on the messages it missed: time to the last one.")

    @Option(help: "Messages the device missed.")
    var messages = 1_000

    @Option(help: "Text bytes per message.")
    var size = 64

    @Flag(help: "Wipe the device's broker session before it logs in again: the archive alone brings the messages.")
    var lostQueue = false

    @OptionGroup var environment: EnvironmentOptions

    func run() async throws {
        try await BenchEnvironment.measure(environment) { try await measure($0) }
    }

    private func measure(_ env: BenchEnvironment) async throws -> JSONLine {
        let run = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let minter = TokenMinter(secret: env.secret)
        let receiver = "catchup-\(run)-r"
        func configuration(_ user: String) async throws -> IMClient.Configuration {
            var configuration = IMClient.Configuration(
                host: env.gateway.host, port: env.gateway.port, token: try await minter.mint(user: user), deviceID: "phone")
            configuration.sendTimeout = nil
            return configuration
        }
        // The device logs in once (the gateway keeps its position), and leaves.
        let first = try await IMClient.connect(try await configuration(receiver))
        await first.logout()
        // The messages it misses.
        let sender = try await IMClient.connect(try await configuration("catchup-\(run)-s"))
        let text = String(repeating: "x", count: size)
        Log.info("catchup: sending \(messages) messages to a device that is away")
        var sends: [Task<IMClient.SendReceipt, any Error>] = []
        for index in 0..<messages {
            sends.append(try await sender.post(to: receiver, content: .text(text), messageID: "m-\(index)"))
        }
        for send in sends { _ = try await send.value }
        await sender.close()
        if lostQueue {
            // A clean start with the device's client id discards its session and queue.
            var wipe = MosquittoClient.Configuration(
                clientID: GatewayTopics(prefix: "im", pubsubSpace: "t").mqttClientID(user: receiver, device: "phone"),
                host: env.broker.endpoint.host, port: env.broker.endpoint.port)
            wipe.cleanStart = true
            wipe.username = env.broker.username
            wipe.password = env.broker.password
            let client = MosquittoClient(configuration: wipe)
            try await client.connect()
            try await client.disconnect()
            await client.close()
        }

        // The device logs in again: everything it missed, in order, then the catch-up's end.
        let started = MonotonicClock.nanoseconds()
        let again = try await IMClient.connect(try await configuration(receiver))
        let loggedIn = MonotonicClock.nanoseconds()
        var received: [String] = []
        var lastAt: UInt64 = 0
        var synced: (at: UInt64, replayed: Int)?
        for await event in again.events {
            switch event {
            case .message(let message):
                received.append(message.messageID)
                if received.count == messages { lastAt = MonotonicClock.nanoseconds() }
            case .synced(let result):
                synced = (MonotonicClock.nanoseconds(), result.replayed)
            default:
                break
            }
            if received.count >= messages && synced != nil { break }
        }
        await again.close()
        let inOrder = received == (0..<messages).map { "m-\($0)" }
        let toLast = Double(lastAt - started) / 1e6
        var json = JSONLine()
        json.add("benchmark", "catchup")
        json.add("archive", environment.archive.hasPrefix("postgres") ? "postgres" : environment.archive)
        json.add("messages", messages)
        json.add("lost_queue", lostQueue)
        json.add("received", received.count)
        json.add("in_order_once", inOrder)
        json.add("login_ms", Double(loggedIn - started) / 1e6, decimals: 1)
        json.add("to_last_ms", toLast, decimals: 1)
        json.add("to_synced_ms", synced.map { Double($0.at - started) / 1e6 }, decimals: 1)
        json.add("replayed", synced?.replayed)
        Log.info(String(format: "catchup: %d of %d in order once: %@; login %.1f ms, last message %.1f ms, catch-up done %.1f ms (%d from the archive)",
                        received.count, messages, inOrder ? "yes" : "NO", Double(loggedIn - started) / 1e6, toLast,
                        synced.map { Double($0.at - started) / 1e6 } ?? -1, synced?.replayed ?? -1))
        return json
    }
}
