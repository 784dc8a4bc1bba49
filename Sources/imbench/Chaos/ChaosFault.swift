/// One fault the chaos run's nemesis injects. Each ends by itself after its duration: what
/// was killed is started again (as a supervisor would), what was stopped continues, a link
/// passes again, an app that was closed opens again.
enum ChaosFault: Sendable, Hashable, CustomStringConvertible {
    /// kill -9 of gateway N; started again on its port after the duration.
    case killGateway(Int)
    /// kill -9 of the broker; started again on its port (and persistence) after the duration.
    case killBroker
    /// kill -9 of gateway N and the broker at once.
    case killGatewayAndBroker(Int)
    /// SIGSTOP of gateway N, SIGCONT after the duration.
    case pauseGateway(Int)
    /// SIGSTOP of the broker, SIGCONT after the duration.
    case pauseBroker
    /// SIGSTOP of every PostgreSQL process, SIGCONT after the duration.
    case pauseDatabase
    /// kill -9 of every PostgreSQL process; started again (recovering from its WAL) after the
    /// duration.
    case killDatabase
    /// RST of device N's connection (the duration is 0).
    case cutDevice(Int)
    /// Nothing passes on device N's connection for the duration, then everything does.
    case stallDevice(Int)
    /// RST of gateway N's connections to the broker (the duration is 0).
    case cutBrokerLink(Int)
    /// Nothing passes between gateway N and the broker for the duration, then everything does.
    case stallBrokerLink(Int)
    /// Device N's app is closed (its client too) for the duration, then opened again, with the
    /// stream position it kept.
    case deviceOffline(Int)

    var description: String {
        switch self {
        case .killGateway(let index): "kill -9 gateway \(index + 1)"
        case .killBroker: "kill -9 broker"
        case .killGatewayAndBroker(let index): "kill -9 gateway \(index + 1) and broker"
        case .pauseGateway(let index): "SIGSTOP gateway \(index + 1)"
        case .pauseBroker: "SIGSTOP broker"
        case .pauseDatabase: "SIGSTOP PostgreSQL"
        case .killDatabase: "kill -9 PostgreSQL"
        case .cutDevice(let index): "cut device \(index + 1)'s link"
        case .stallDevice(let index): "stall device \(index + 1)'s link"
        case .cutBrokerLink(let index): "cut gateway \(index + 1)'s broker link"
        case .stallBrokerLink(let index): "stall gateway \(index + 1)'s broker link"
        case .deviceOffline(let index): "device \(index + 1) offline (app closed)"
        }
    }

    /// Whether the fault concerns one device only (its recovery is measured from its own end).
    var device: Int? {
        switch self {
        case .cutDevice(let index), .stallDevice(let index), .deviceOffline(let index): index
        default: nil
        }
    }

    /// The kinds, for `--faults` and the schedule's weights.
    enum Kind: String, CaseIterable, Sendable {
        case killGateway = "kill-gateway"
        case killBroker = "kill-broker"
        case killBoth = "kill-both"
        case pauseGateway = "pause-gateway"
        case pauseBroker = "pause-broker"
        case pauseDatabase = "pause-database"
        case killDatabase = "kill-database"
        case cutDevice = "cut-device"
        case stallDevice = "stall-device"
        case cutBrokerLink = "cut-broker-link"
        case stallBrokerLink = "stall-broker-link"
        case deviceOffline = "device-offline"

        /// How often it is drawn, relative to the others.
        var weight: Int {
            switch self {
            case .killGateway: 4
            case .killBroker: 2
            case .killBoth: 1
            case .pauseGateway: 2
            case .pauseBroker: 1
            case .pauseDatabase: 1
            case .killDatabase: 1
            case .cutDevice: 3
            case .stallDevice: 2
            case .cutBrokerLink: 2
            case .stallBrokerLink: 1
            case .deviceOffline: 2
            }
        }

        /// How long it lasts, seconds.
        var duration: ClosedRange<Double> {
            switch self {
            case .killGateway, .killBroker, .killBoth, .killDatabase: 0.5...4
            case .pauseGateway, .pauseBroker, .pauseDatabase: 0.5...3
            case .cutDevice, .cutBrokerLink: 0...0
            case .stallDevice, .stallBrokerLink: 1...5
            case .deviceOffline: 2...10
            }
        }
    }
}

/// A fault at its time in the run.
struct ScheduledFault: Sendable, Hashable {
    /// Seconds from the start of the faults.
    var at: Double
    var fault: ChaosFault
    /// Seconds until it ends by itself.
    var duration: Double
}
