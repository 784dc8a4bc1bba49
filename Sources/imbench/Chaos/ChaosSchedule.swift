/// The nemesis's plan for a run, fixed by its seed: a fault every `gap` seconds (drawn), of a
/// kind drawn by weight among those allowed, on a target drawn among the gateways or devices;
/// with probability `overlap` a second fault starts within a second of the first, so that
/// faults also come together (besides the long ones that outlast the gap).
struct ChaosSchedule: Sendable, Hashable {
    var faults: [ScheduledFault]

    struct Settings: Sendable, Hashable {
        var seconds: Double
        var gateways: Int
        var devices: Int
        var kinds: [ChaosFault.Kind] = ChaosFault.Kind.allCases
        var gap: ClosedRange<Double> = 2...6
        var overlap: Double = 0.3
    }

    init(faults: [ScheduledFault]) {
        self.faults = faults
    }

    /// The schedule of `settings` for `seed`: the same on every run.
    init(seed: UInt64, _ settings: Settings) {
        var random = SeededRandom(seed: seed ^ 0x6E65_6D65_7369_7321)
        var faults: [ScheduledFault] = []
        let kinds = settings.kinds.filter { settings.gateways > 0 || !$0.needsGateway }
        let total = kinds.map(\.weight).reduce(0, +)
        guard total > 0, settings.devices > 0 else {
            self.faults = []
            return
        }
        func draw() -> (ChaosFault, Double) {
            var pick = Int.random(in: 0..<total, using: &random)
            var kind = kinds[0]
            for candidate in kinds {
                if pick < candidate.weight {
                    kind = candidate
                    break
                }
                pick -= candidate.weight
            }
            let gateway = Int.random(in: 0..<max(settings.gateways, 1), using: &random)
            let device = Int.random(in: 0..<settings.devices, using: &random)
            let range = kind.duration
            let duration = range.lowerBound == range.upperBound ? range.lowerBound : Double.random(in: range, using: &random)
            let fault: ChaosFault =
                switch kind {
                case .killGateway: .killGateway(gateway)
                case .killBroker: .killBroker
                case .killBoth: .killGatewayAndBroker(gateway)
                case .pauseGateway: .pauseGateway(gateway)
                case .pauseBroker: .pauseBroker
                case .pauseDatabase: .pauseDatabase
                case .killDatabase: .killDatabase
                case .cutDevice: .cutDevice(device)
                case .stallDevice: .stallDevice(device)
                case .cutBrokerLink: .cutBrokerLink(gateway)
                case .stallBrokerLink: .stallBrokerLink(gateway)
                case .deviceOffline: .deviceOffline(device)
                }
            return (fault, (duration * 10).rounded() / 10)
        }
        var now = Double.random(in: settings.gap, using: &random) / 2
        while now < settings.seconds {
            let (fault, duration) = draw()
            faults.append(ScheduledFault(at: (now * 10).rounded() / 10, fault: fault, duration: duration))
            if Double.random(in: 0..<1, using: &random) < settings.overlap {
                let (second, secondDuration) = draw()
                let at = now + Double.random(in: 0...1, using: &random)
                if at < settings.seconds {
                    faults.append(ScheduledFault(at: (at * 10).rounded() / 10, fault: second, duration: secondDuration))
                }
            }
            now += Double.random(in: settings.gap, using: &random)
        }
        self.faults = faults.sorted { $0.at < $1.at }
    }
}

extension ChaosFault.Kind {
    /// Whether the fault names a gateway.
    var needsGateway: Bool {
        switch self {
        case .killGateway, .killBoth, .pauseGateway, .cutBrokerLink, .stallBrokerLink: true
        default: false
        }
    }
}
