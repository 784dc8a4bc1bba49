import Mosquitto

/// What `imgw check-config` can tell about a broker from outside: whether it lets anonymous
/// clients in (then anyone who reaches it can read and forge everything under the prefix and
/// take over device sessions), whether it takes the gateway's credentials, what its CONNACK
/// offers (``BrokerFit``), and whether the gateway may subscribe to its topics.
public enum BrokerCheck {
    /// One thing found, for the operator.
    public struct Finding: Sendable, Hashable, CustomStringConvertible {
        public enum Level: String, Sendable, Hashable {
            case ok, warning, error
        }

        public var level: Level
        public var text: String

        public var description: String { "\(level.rawValue): \(text)" }
    }

    /// Connects to `broker` anonymously, then with its credentials, and subscribes to
    /// `{prefix}/#` as the gateway would; each step at most `timeout` seconds. `settings`:
    /// what the gateway asks of the broker (its CONNACK is held against them).
    public static func run(
        _ broker: BrokerEndpoint, prefix: String, settings: GatewayConfiguration.BrokerSettings = .init(), timeout: Double = 5
    ) async -> [Finding] {
        var findings: [Finding] = []
        let loop = MosquittoEventLoop.shared

        var anonymousConfiguration = broker.clientConfiguration(clientID: "imgw-check-anonymous-\(UInt32.random(in: 0...UInt32.max))")
        anonymousConfiguration.username = nil
        anonymousConfiguration.password = nil
        anonymousConfiguration.connectTimeout = timeout
        let anonymous = MosquittoClient(configuration: anonymousConfiguration, loop: loop)
        do {
            try await anonymous.connect()
            findings.append(Finding(
                level: .warning,
                text: "\(broker) accepts anonymous clients: anyone who reaches it can read and forge everything under \(prefix)/ and take over device sessions (docs/SECURITY.md, \"The broker\")"))
        } catch MosquittoError.connectionRefused {
            findings.append(Finding(level: .ok, text: "\(broker) refuses anonymous clients"))
        } catch {
            findings.append(Finding(level: .error, text: "cannot reach \(broker): \(error)"))
            await anonymous.close()
            return findings
        }
        await anonymous.close()

        // Asks for the session expiry a device session asks for (a broker tells its own only
        // when it is smaller); the session is ended below.
        var gatewayConfiguration = broker.clientConfiguration(clientID: "imgw-check-\(UInt32.random(in: 0...UInt32.max))")
        gatewayConfiguration.connectTimeout = timeout
        gatewayConfiguration.sessionExpiryInterval = UInt32(clamping: settings.sessionExpiry)
        let gateway = MosquittoClient(configuration: gatewayConfiguration, loop: loop)
        do {
            let fit = BrokerFit(try await gateway.connect().capabilities, broker: settings)
            for problem in fit.problems { findings.append(Finding(level: .error, text: "imgw cannot work with \(broker): \(problem)")) }
            for note in fit.notes { findings.append(Finding(level: .warning, text: note)) }
        } catch {
            findings.append(Finding(level: .error, text: "\(broker) refuses the gateway's credentials (broker.username, broker.password): \(error)"))
            await gateway.close()
            return findings
        }
        do {
            let granted = try await gateway.subscribe("\(prefix)/#", qos: .atLeastOnce)
            findings.append(Finding(level: .ok, text: "the gateway's account may subscribe to \(prefix)/# (granted QoS \(granted.rawValue))"))
        } catch {
            findings.append(Finding(level: .error, text: "the gateway's account may not subscribe to \(prefix)/#: \(error)"))
        }
        await gateway.close()
        await endSession(of: gatewayConfiguration)
        return findings
    }

    /// Ends the session the check left on the broker: the same client id again, clean, with
    /// no session expiry.
    private static func endSession(of configuration: MosquittoClient.Configuration) async {
        var clean = configuration
        clean.cleanStart = true
        clean.sessionExpiryInterval = 0
        let client = MosquittoClient(configuration: clean, loop: .shared)
        if (try? await client.connect()) != nil { try? await client.disconnect() }
        await client.close()
    }
}
