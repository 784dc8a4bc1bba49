import Synchronization
import ArgumentParser
import Foundation
import IMClient
import IMGateway

#if canImport(Glibc)
import Glibc
#endif

/// `imbench chaos`: crashes, cuts and stalls, alone and overlapping, while users chat; then
/// every promise checked. A cluster on this machine (``ChaosCluster``: PostgreSQL, mosquitto,
/// N imgw, proxies), users with 1 to 3 devices each chatting one-to-one and in groups through
/// IMClient at a steady total rate, a nemesis on a seeded schedule (``ChaosSchedule``). When
/// the time is up, everything is healed, every send is answered, every device logs in once
/// more and catches up; then the checker (``ChaosVerdict``) counts what was lost, duplicated,
/// unexpected or reordered, and how long devices took to be back after each recovery. Exit
/// status 1 unless all of it holds.
struct ChaosCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chaos",
        abstract: "Chat under crashes, cuts and stalls of gateways, broker, database and links; checks that nothing ACKed is lost.",
        discussion: """
            Starts PostgreSQL, mosquitto (configured like imgw's embedded broker) and --gateways imgw \
            sharing the PostgreSQL archive, with a fault-injecting proxy between each gateway and the \
            broker and in front of the gateways for each device. Prints the fault timeline and the \
            result, then a JSON line; exits 1 on anything lost, duplicated, unexpected, reordered or \
            unanswered, or a device slower than --max-recovery to come back.
            """)

    @Option(help: "Seconds of chat under faults.")
    var seconds: Double = 60

    @Option(help: "The seed of the fault schedule, the devices and their chats (default: drawn, and printed).")
    var seed: UInt64?

    @Option(help: "Users (each with 1 to 3 devices).")
    var users = 20

    @Option(help: "Chat messages per second, all devices together.")
    var rate: Double = 50

    @Option(help: "imgw processes.")
    var gateways = 2

    @Option(help: "Groups (members drawn among the users).")
    var groups = 4

    @Option(help: "Members per group.")
    var groupSize = 5

    @Option(help: "Fault kinds, comma-separated (default: all): \(ChaosFault.Kind.allCases.map(\.rawValue).joined(separator: ", ")), or none.")
    var faults: String?

    @Option(help: "Seconds between faults: MIN-MAX.")
    var gap = "2-6"

    @Option(help: "The longest a device may take to be back after a recovery, seconds.")
    var maxRecovery: Double = 5

    @Option(help: "Write the JSON result here too.")
    var json: String?

    @Option(help: "Write every send and every arrival here, one JSON object a line, for a post-mortem.")
    var trace: String?

    @Option(help: "The imgw binary (default: the one next to imbench).")
    var imgw: String?

    @Flag(help: "Echo the processes' output.")
    var verbose = false

    @Flag(help: "Keep the run's directory (configurations, broker data) for a post-mortem.")
    var keep = false

    func validate() throws {
        guard seconds > 0, users >= 2, rate > 0, gateways >= 1, groups >= 0, maxRecovery > 0 else {
            throw ValidationError("--seconds, --rate and --max-recovery must be positive, --users at least 2, --gateways at least 1")
        }
        guard groups == 0 || (2...users).contains(groupSize) else { throw ValidationError("--group-size must be 2 to --users") }
        _ = try kinds
        guard gapRange != nil else { throw ValidationError("--gap wants MIN-MAX seconds with 0 < MIN <= MAX, e.g. 2-6") }
    }

    var kinds: [ChaosFault.Kind] {
        get throws {
            guard let faults else { return ChaosFault.Kind.allCases }
            if faults == "none" { return [] }
            return try faults.split(separator: ",").map { name in
                guard let kind = ChaosFault.Kind(rawValue: String(name)) else {
                    throw ValidationError("--faults: unknown kind \(name); known: \(ChaosFault.Kind.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                return kind
            }
        }
    }

    var gapRange: ClosedRange<Double>? {
        let parts = gap.split(separator: "-").compactMap { Double($0) }
        guard parts.count == 2, parts[0] > 0, parts[0] <= parts[1] else { return nil }
        return parts[0]...parts[1]
    }

    func run() async throws {
        let seed = self.seed ?? UInt64.random(in: 1...UInt64(Int64.max))
        Log.info("chaos: seed \(seed)")
        var random = SeededRandom(seed: seed)
        let plan = ChaosPlan(seed: seed, users: users, groups: groups, groupSize: groupSize, using: &random)
        let schedule = ChaosSchedule(
            seed: seed,
            .init(seconds: seconds, gateways: gateways, devices: plan.directory.deviceUsers.count, kinds: try kinds, gap: gapRange ?? 2...6))

        ChildRegistry.sweepOrphans()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            ChildRegistry.directoryPrefix + "chaos-\(String(seed, radix: 36))-\(String(UInt32.random(in: 0...UInt32.max), radix: 36))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        if keep { Log.info("chaos: keeping \(directory.path)") } else { ChildRegistry.shared.removeLater(directory.path) }

        let secret = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let apiKey = (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let cluster = try await ChaosCluster.start(
            .init(gateways: gateways, imgw: imgw ?? BenchGateway.defaultExecutable(), secret: secret, apiKey: apiKey, verbose: verbose),
            in: directory)
        let report: ChaosReport
        do {
            report = try await measure(cluster, plan: plan, schedule: schedule, seed: seed, secret: secret, apiKey: apiKey)
        } catch {
            await cluster.shutdown()
            ChildRegistry.shared.removeDirectories()
            throw error
        }
        await cluster.shutdown()
        ChildRegistry.shared.removeDirectories()
        FileHandle.standardOutput.write(Data((report.text + "\n").utf8))
        let line = report.json
        line.print()
        if let json { try (line.text + "\n").write(toFile: json, atomically: true, encoding: .utf8) }
        if !report.passed { throw ExitCode(1) }
    }

    private func measure(
        _ cluster: ChaosCluster, plan: ChaosPlan, schedule: ChaosSchedule, seed: UInt64, secret: String, apiKey: String
    ) async throws -> ChaosReport {
        let ledger = ChaosLedger(devices: plan.directory.deviceUsers.count)
        await cluster.onCrash { index, text in
            ledger.log("gateway \(index + 1) exited by itself (started again): \(text)")
            ledger.note("gateway crashed", "gateway \(index + 1): \(text)")
        }
        try await cluster.addDeviceLinks(plan.directory.deviceUsers.count, seed: seed)
        let links = await cluster.deviceLinks

        // The app backend's groups, through the first gateway's server API.
        let api = try BenchAPI(port: cluster.apiPorts[0], key: apiKey)
        for (group, members) in plan.directory.groups.sorted(by: { $0.key < $1.key }) {
            try await api.createGroup(group, members: members.sorted())
        }
        await api.shutdown()

        let minter = TokenMinter(secret: secret)
        let devices = plan.devices.enumerated().map { index, device in
            ChaosDevice(index: index, user: device.user, deviceID: device.id, port: links[index].port, minter: minter, ledger: ledger)
        }
        Log.info("chaos: \(devices.count) devices of \(users) users logging in")
        await withTaskGroup(of: Void.self) { group in
            for device in devices { group.addTask { await device.open() } }
        }

        // Chat and faults.
        let start = ledger.now
        let deadline = start + seconds
        ledger.log("chat starts: \(devices.count) devices, \(Int(rate)) chats/s in all; \(schedule.faults.count) faults scheduled")
        let perDevice = rate / Double(devices.count)
        let senders = Task {
            await withTaskGroup(of: Void.self) { group in
                for device in devices {
                    let choices = plan.conversations[device.index]
                    let draws = ChaosDraws(seed: seed &+ UInt64(device.index) &* 7919)
                    group.addTask {
                        await device.sendUntil(deadline, interval: { draws.interval(perSecond: perDevice) }, pick: { draws.pick(choices) })
                    }
                }
            }
        }
        let nemesis = ChaosNemesis(cluster: cluster, devices: devices, ledger: ledger)
        await nemesis.run(schedule, from: start)
        ledger.log("the last fault is undone")
        try await cluster.heal()
        ledger.log("everything is up and passing")
        await senders.value
        ledger.log("chat stopped; every send answered (\(ledger.pendingSends) pending)")

        // Every device logs in once more and catches up.
        var synced = 0
        await withTaskGroup(of: Bool.self) { group in
            for device in devices { group.addTask { await device.lastLogin(within: 60) } }
            for await caughtUp in group where caughtUp { synced += 1 }
        }
        ledger.log("last logins: \(synced) of \(devices.count) devices caught up")
        await awaitQuiet(ledger, devices: devices.count)
        for device in devices { await device.finish() }

        let snapshot = ledger.snapshot
        if let trace { try Self.writeTrace(snapshot, devices: devices.map(\.name), to: trace) }
        let verdict = ChaosVerdict(sends: snapshot.sends, arrivals: snapshot.arrivals, directory: plan.directory)
        let backs = ChaosRecovery.backTimes(snapshot.spells, snapshot.windows)
        let command = "imbench chaos --seed \(seed) --seconds \(Int(seconds)) --users \(users) --rate \(Int(rate)) --gateways \(gateways)"
            + " --groups \(groups) --group-size \(groupSize) --gap \(gap)" + (faults.map { " --faults \($0)" } ?? "")
        return ChaosReport(
            seed: seed, command: command, seconds: seconds, gateways: gateways, users: users,
            devices: devices.map(\.name), rate: rate, scheduled: schedule.faults.count, verdict: verdict, backs: backs,
            maxRecovery: maxRecovery, lastLogins: (synced, devices.count), snapshot: snapshot)
    }

    /// Every send and arrival as JSON lines.
    private static func writeTrace(_ snapshot: ChaosLedger.Snapshot, devices: [String], to path: String) throws {
        var lines: [String] = []
        for send in snapshot.sends {
            var line = JSONLine()
            line.add("send", send.messageID)
            line.add("device", devices[send.device])
            line.add("to", "\(send.conversation)")
            line.add("sequence", send.sequence)
            line.add("outcome", "\(send.outcome)")
            line.add("sent_at", send.sentAt)
            line.add("answered_at", send.answeredAt)
            lines.append(line.text)
        }
        for (device, arrivals) in snapshot.arrivals.enumerated() {
            for arrival in arrivals {
                var line = JSONLine()
                line.add("arrival", arrival.messageID)
                line.add("device", devices[device])
                line.add("from", arrival.from)
                line.add("carbon", arrival.isCarbon)
                line.add("offset", arrival.offset.map { Int($0) })
                line.add("archived", arrival.archived)
                line.add("at", arrival.at)
                lines.append(line.text)
            }
        }
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// Waits until no device's app has seen a new message for 2 s (at most 30 s): what the
    /// broker still had queued arrives, and a late duplicate would too.
    private func awaitQuiet(_ ledger: ChaosLedger, devices: Int) async {
        var counts = (0..<devices).map { ledger.arrivalCount($0) }
        let limit = ledger.now + 30
        while ledger.now < limit {
            try? await Task.sleep(for: .seconds(2))
            let now = (0..<devices).map { ledger.arrivalCount($0) }
            if now == counts { return }
            counts = now
        }
    }
}

/// Who the run's users and devices are, and whom each device chats with: drawn from the seed.
struct ChaosPlan: Sendable {
    struct Device: Sendable {
        var user: String
        var id: String
    }

    var devices: [Device]
    var directory: ChaosDirectory
    /// For each device, the conversations it sends to.
    var conversations: [[ChaosConversation]]

    init(seed: UInt64, users: Int, groups: Int, groupSize: Int, using random: inout SeededRandom) {
        let names = (1...users).map { String(format: "u%02d", $0) }
        var devices: [Device] = []
        for name in names {
            for number in 1...Int.random(in: 1...3, using: &random) { devices.append(Device(user: name, id: "d\(number)")) }
        }
        var memberships: [String: Set<String>] = [:]
        for number in 0..<groups {
            memberships["g\(number + 1)"] = Set(names.shuffled(using: &random).prefix(groupSize))
        }
        self.devices = devices
        directory = ChaosDirectory(deviceUsers: devices.map(\.user), groups: memberships)
        conversations = devices.map { device in
            names.filter { $0 != device.user }.map { ChaosConversation.user($0) }
                + memberships.filter { $0.value.contains(device.user) }.keys.sorted().map { ChaosConversation.group($0) }
        }
    }
}

/// One device's draws (seeded): when it sends next and to whom. A quarter of a member's
/// messages go to its groups.
final class ChaosDraws: Sendable {
    private let random: Mutex<SeededRandom>

    init(seed: UInt64) {
        random = Mutex(SeededRandom(seed: seed))
    }

    /// Seconds until the next send: exponential, `perSecond` on average.
    func interval(perSecond: Double) -> Double {
        let uniform = random.withLock { Double.random(in: Double.ulpOfOne..<1, using: &$0) }
        return min(-log(uniform) / perSecond, 10 / perSecond)
    }

    func pick(_ choices: [ChaosConversation]) -> ChaosConversation {
        random.withLock { random in
            let groups = choices.filter { if case .group = $0 { true } else { false } }
            let users = choices.filter { if case .user = $0 { true } else { false } }
            if !groups.isEmpty, Double.random(in: 0..<1, using: &random) < 0.25 { return groups.randomElement(using: &random)! }
            return users.randomElement(using: &random)!
        }
    }
}
