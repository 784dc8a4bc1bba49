import ArgumentParser
import Foundation
import IMClient

/// `imcli location share --with USER...`: share this user's position for a while.
struct ShareLocation: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share",
        abstract: "Share this user's position with others for a while.",
        discussion: """
            Starts a share with the users of --with for --for seconds (the gateway
            shortens it to its location.max_share_duration), then:
              --lat X --lon Y  sends that position (timed now), then holds the
                               share until --for has passed or Ctrl-C
              --stdin          sends one position per input line, "LAT LON" or
                               "LAT,LON" in degrees, until the input ends, --for
                               has passed or Ctrl-C. Other lines are reported on
                               stderr and skipped. Lines coming faster than the
                               gateway's location.max_updates_per_second (from
                               --config) are thinned out: the newest is sent.
              neither          sends nothing (positions may come from the user's
                               other devices) and holds the share
            Then it stops the share, logs out and exits 0. It prints one status
            line on stderr (with --json also a `sharing` line). The audience sees
            the positions with `imcli location watch`. Logs in as device
            cli-location unless --device is given.
            """)

    @OptionGroup var options: ClientOptions

    @Option(name: .customLong("with"), help: ArgumentHelp(
        "Who may watch: user ids, comma-separated (or --with again).", valueName: "USER[,USER...]"))
    var audience: [String] = []

    @Option(name: .customLong("for"), help: ArgumentHelp("How long to share.", valueName: "SECONDS"))
    var duration: Int = 300

    @Option(parsing: .unconditional, help: ArgumentHelp("Latitude in degrees, -90...90 (with --lon).", valueName: "X"))
    var lat: Double?

    @Option(parsing: .unconditional, help: ArgumentHelp("Longitude in degrees, -180...180 (with --lat).", valueName: "Y"))
    var lon: Double?

    @Flag(help: #"Read positions from standard input, one per line: "LAT LON" or "LAT,LON"."#)
    var stdin = false

    /// The users of --with, commas split.
    var users: [String] {
        audience.flatMap { $0.split(separator: ",", omittingEmptySubsequences: false) }
            .map { $0.trimmingCharacters(in: .whitespaces) }
    }

    func validate() throws {
        guard !users.isEmpty else { throw ValidationError("say who may watch: --with USER[,USER...]") }
        guard !users.contains(where: \.isEmpty) else { throw ValidationError("--with: an empty user id in \(audience.joined(separator: ","))") }
        guard duration > 0 else { throw ValidationError("--for must be positive") }
        switch (lat, lon) {
        case (nil, nil): break
        case (.some(let lat), .some(let lon)):
            do throws(PositionError) { _ = try Position(lat: lat, lon: lon) } catch { throw ValidationError(error.reason) }
            guard !stdin else { throw ValidationError("give either --lat/--lon or --stdin, not both") }
        default: throw ValidationError("give --lat and --lon together")
        }
    }

    func run() async throws {
        let output = options.output
        let fixed = try lat.map { try Position(lat: $0, lon: lon!) }
        try await reportingFailures(output, timeout: options.timeout) {
            let gateway = try options.gatewayConfiguration()
            var seconds = duration
            if seconds > gateway.location.maxShareDuration {
                seconds = gateway.location.maxShareDuration
                output.status("note: the gateway shortens shares to location.max_share_duration, \(seconds) s")
            }
            let client = try await options.connect(defaultDevice: "cli-location", gateway: gateway)
            var sharing = false
            do {
                try await client.shareLocation(with: users, for: .seconds(seconds))
                sharing = true
                if let fixed { try await client.updateLocation(fixed.fixNow) }
            } catch {
                if sharing { try? await client.stopSharingLocation() }
                await options.end(client)
                throw error
            }
            let source = fixed.map { "its position \($0.lat),\($0.lon)" }
                ?? (stdin ? "the positions read from stdin" : "its position (none sent from here)")
            output.sharing(as: client.session, with: users, seconds: seconds, from: source)

            let session = LiveSession(client, output) { client in
                do {
                    try await client.stopSharingLocation()
                } catch {
                    output.status("warning: could not stop the share (\(error)); it ends by itself when its time is up")
                }
                await client.logout()
            }
            let feeder = stdin ? Task {
                let rate = gateway.location.maxUpdatesPerSecond
                let interval: Duration = rate > 0 ? .seconds(1 / rate) + .milliseconds(50) : .zero
                let failure = await Self.send(Position.standardInput(output), through: client, every: interval, output)
                session.stop()
                return failure
            } : nil
            let exitCode = await session.run(for: .seconds(seconds), shown: { _ in false }) { event in
                // The broker may have lost the retained position (a restart without
                // persistence): the fixed one again.
                if case .reconnected = event, let fixed { try? await client.updateLocation(fixed.fixNow) }
            }
            feeder?.cancel()
            if let failure = await feeder?.value { throw failure }
            if exitCode != 0 { throw ExitCode(exitCode) }
            output.status("stopped sharing")
        }
    }

    /// Sends `positions` as they come, at most one per `interval` (the gateway's rate
    /// limit); a refused position ends the sending (nil: the input ended), a lost one is
    /// reported and the next one sent.
    static func send(_ positions: AsyncStream<Position>, through client: IMClient, every interval: Duration, _ output: Output) async -> CLIFailure? {
        let clock = ContinuousClock()
        var next = clock.now
        var iterator = positions.makeAsyncIterator()
        while !Task.isCancelled {
            try? await clock.sleep(until: next)
            guard let position = await iterator.next() else { return nil }
            next = clock.now + interval
            let result = await Result { () async throws(IMClientError) in try await client.updateLocation(position.fixNow) }
            switch result {
            case .success:
                break
            case .failure(.refused(let code, _)) where code == .rateLimited:
                output.status("warning: position \(position.lat),\(position.lon) not sent: RATE_LIMITED (the gateway accepts fewer per second)")
            case .failure(.refused(let code, let message)):
                return CLIFailure(refused: "position \(position.lat),\(position.lon)", code, message,
                                  hint: code == .forbidden ? "the share has ended" : nil)
            case .failure(let error):
                output.status("warning: position \(position.lat),\(position.lon) not sent: \(error)")
            }
        }
        return nil
    }
}
