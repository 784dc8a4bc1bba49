import ArgumentParser
import Foundation
import IMGateway
import NIOCore
import NIOPosix

/// `imbench connect`: many users at once. Logs in `users` distinct users (each its own
/// device and MQTT session at the gateway) with at most `concurrency` logins in flight,
/// holds them with heartbeats, and reports logins/s, failures, and the gateway process's
/// memory (VmRSS), descriptors and idle CPU, in total and per user.
struct ConnectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "connect",
        abstract: "Login storm and idle cost: logins/s, gateway RSS, descriptors and CPU per user.")

    @Option(help: "Users to log in (each a distinct user and device).")
    var users: Int

    @Option(help: "At most this many logins started per second (default: unlimited).")
    var rate: Double?

    @Option(help: "Logins in flight at most.")
    var concurrency = 200

    @Option(help: "Seconds to hold the logged-in users (heartbeating) before disconnecting.")
    var hold: Double = 10

    @Option(help: "Heartbeat interval in seconds (default: the one LOGIN_OK announces).")
    var heartbeat: Double?

    @Option(help: "The gateway's pid, to measure it when --gateway names a running one.")
    var gatewayPid: Int32?

    @OptionGroup var environment: EnvironmentOptions

    func validate() throws {
        guard users >= 1 else { throw ValidationError("--users must be at least 1") }
        guard concurrency >= 1 else { throw ValidationError("--concurrency must be at least 1") }
        guard hold >= 0 else { throw ValidationError("--hold must not be negative") }
        if let rate, rate <= 0 { throw ValidationError("--rate must be positive") }
        if let heartbeat, heartbeat <= 0 { throw ValidationError("--heartbeat must be positive") }
    }

    func run() async throws {
        let fdLimit = DescriptorLimit.raiseToHardLimit()
        if users * 2 + 100 > fdLimit {
            Log.info(
                "note: each user costs imgw about 2 descriptors (TLV socket, MQTT socket); "
                    + "\(users) users need about \(users * 2 + 100), the limit is \(fdLimit)")
        }
        let env = try await BenchEnvironment.start(environment)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            let json = try await measure(env, loop: group.next(), fdLimit: fdLimit)
            await env.shutdown()
            try? await group.shutdownGracefully()
            json.print()
        } catch {
            let failure = env.failure(error)
            await env.shutdown()
            try? await group.shutdownGracefully()
            throw failure
        }
    }

    private func measure(_ env: BenchEnvironment, loop: any EventLoop, fdLimit: Int) async throws -> JSONLine {
        let runID = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        Log.info("connect: minting \(users) tokens")
        let minter = TokenMinter(secret: env.secret)
        var tokens: [String] = []
        tokens.reserveCapacity(users)
        for index in 0..<users {
            tokens.append(try await minter.mint(user: "bench-\(runID)-u\(index)", device: "bench", validFor: 3600))
        }
        let gatewayPID = env.gatewayPID ?? gatewayPid
        try await Task.sleep(for: .seconds(1))
        let gatewayBefore = gatewayPID.flatMap { ProcessSample.take($0) }
        let brokerBefore = env.brokerPID.flatMap { ProcessSample.take($0) }

        Log.info("connect: logging in \(users) users, \(concurrency) at a time" + (rate.map { ", at most \(Int($0))/s" } ?? ""))
        let counters = ConnectCounters()
        let progress = Task {
            var previous = 0
            var second = 0
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                if Task.isCancelled { return }
                second += 1
                let done = counters.loggedIn.load(ordering: .relaxed)
                Log.info(
                    "connect \(second) s  logged in \(done)/\(users)  \(done - previous)/s  failed \(counters.failed.load(ordering: .relaxed))"
                        + (gatewayPID.flatMap { ProcessSample.take($0) }.map { "  imgw RSS \($0.rssKiB / 1024) MiB, \($0.descriptors) fds" } ?? ""))
                previous = done
            }
        }
        let driver = LoginDriver(
            gateway: env.gateway, webSocketPath: env.webSocketPath, concurrency: concurrency, rate: rate, heartbeat: heartbeat.map { .milliseconds(Int64($0 * 1000)) })
        let stormStart = (
            system: SystemSample.take(), gateway: gatewayPID.flatMap { ProcessSample.take($0) },
            broker: env.brokerPID.flatMap { ProcessSample.take($0) }, bench: ProcessSample.take(ProcessSample.ownPID()))
        let outcome = await driver.run(tokens: tokens, loop: loop, counters: counters)
        let stormEnd = (
            system: SystemSample.take(), gateway: gatewayPID.flatMap { ProcessSample.take($0) },
            broker: env.brokerPID.flatMap { ProcessSample.take($0) }, bench: ProcessSample.take(ProcessSample.ownPID()))
        progress.cancel()
        let loginsPerSecond = Double(outcome.devices.count) / outcome.seconds
        Log.info(
            "connect: \(outcome.devices.count) logged in, \(outcome.failures.values.reduce(0, +)) failed in "
                + String(format: "%.2f s (%.0f logins/s)", outcome.seconds, loginsPerSecond))
        for (reason, count) in outcome.failures.sorted(by: { $0.value > $1.value }) {
            Log.info("  \(count) x \(reason)")
        }

        // Let the gateway settle (presence publishes, allocator), then hold.
        try await Task.sleep(for: .seconds(1))
        let gatewayAfter = gatewayPID.flatMap { ProcessSample.take($0, threads: true) }
        let brokerAfter = env.brokerPID.flatMap { ProcessSample.take($0) }
        let holdSystemStart = SystemSample.take()
        for device in outcome.devices { device.send(.start) }
        Log.info("connect: holding \(outcome.devices.count) users for \(Int(hold)) s")
        try await Task.sleep(for: .milliseconds(Int(hold * 1000)))
        let gatewayEnd = gatewayPID.flatMap { ProcessSample.take($0, threads: true) }
        let brokerEnd = env.brokerPID.flatMap { ProcessSample.take($0) }
        let holdSystemEnd = SystemSample.take()
        let dropped = counters.closedAfterLogin.load(ordering: .relaxed)
        for device in outcome.devices { device.send(.stop) }
        Log.info("connect: disconnecting")
        await withTaskGroup(of: Void.self) { group in
            for device in outcome.devices { group.addTask { await device.close() } }
        }

        let loggedIn = max(1, outcome.devices.count)
        var json = JSONLine()
        json.add("benchmark", "connect")
        json.add("users", users)
        json.add("concurrency", concurrency)
        json.add("rate", rate, decimals: 0)
        json.add("hold_s", hold, decimals: 1)
        json.add("logged_in", outcome.devices.count)
        json.add("failures", outcome.failures.values.reduce(0, +))
        var reasons = JSONLine()
        for (reason, count) in outcome.failures.sorted(by: { $0.value > $1.value }) { reasons.add(reason, count) }
        json.add("failure_reasons", .object(reasons))
        json.add("login_seconds", outcome.seconds)
        json.add("logins_per_s", loginsPerSecond, decimals: 0)
        json.add("login_p50_ms", Double(outcome.latency.valueAtPercentile(50)) / 1000)
        json.add("login_p99_ms", Double(outcome.latency.valueAtPercentile(99)) / 1000)
        json.add("login_max_ms", Double(outcome.latency.max) / 1000)
        // CPU during the login storm, percent of one core (2 cores: 200 is everything).
        var stormMeasured = 0.0
        if let a = stormStart.gateway, let b = stormEnd.gateway {
            stormMeasured += b.cpuPercent(since: a)
            json.add("login_gateway_cpu_percent", b.cpuPercent(since: a), decimals: 0)
        }
        if let a = stormStart.broker, let b = stormEnd.broker {
            stormMeasured += b.cpuPercent(since: a)
            json.add("login_broker_cpu_percent", b.cpuPercent(since: a), decimals: 0)
        }
        if let a = stormStart.bench, let b = stormEnd.bench {
            stormMeasured += b.cpuPercent(since: a)
            json.add("login_bench_cpu_percent", b.cpuPercent(since: a), decimals: 0)
        }
        json.add("login_other_cpu_percent", max(0, stormEnd.system.cpuPercent(since: stormStart.system) - stormMeasured), decimals: 0)
        json.add("login_softirq_cpu_percent", stormEnd.system.interruptPercent(since: stormStart.system), decimals: 0)
        json.add("load_avg", stormStart.system.loadAverage, decimals: 2)
        json.add("gateway_rss_before_kb", gatewayBefore?.rssKiB)
        json.add("gateway_rss_after_kb", gatewayAfter?.rssKiB)
        json.add("gateway_rss_end_kb", gatewayEnd?.rssKiB)
        if let b = gatewayBefore, let a = gatewayAfter {
            json.add("rss_per_user_kb", Double(a.rssKiB - b.rssKiB) / Double(loggedIn), decimals: 2)
            json.add("gateway_fds_before", b.descriptors)
            json.add("gateway_fds_after", a.descriptors)
            json.add("fds_per_user", Double(a.descriptors - b.descriptors) / Double(loggedIn), decimals: 2)
        }
        if let a = gatewayAfter, let e = gatewayEnd {
            json.add("gateway_idle_cpu_percent", e.cpuPercent(since: a), decimals: 2)
            json.add("gateway_threads", e.threads.count)
            var threads = JSONLine()
            for thread in e.threadCPUPercent(since: a).prefix(8) { threads.add(thread.name, thread.percent, decimals: 1) }
            json.add("gateway_idle_threads_cpu_percent", .object(threads))
        }
        if let b = brokerBefore, let a = brokerAfter {
            json.add("broker_rss_per_user_kb", Double(a.rssKiB - b.rssKiB) / Double(loggedIn), decimals: 2)
        }
        if let a = brokerAfter, let e = brokerEnd {
            json.add("broker_idle_cpu_percent", e.cpuPercent(since: a), decimals: 2)
        }
        json.add("machine_cpu_percent_during_hold", holdSystemEnd.cpuPercent(since: holdSystemStart), decimals: 1)
        json.add("heartbeats_sent", counters.heartbeatsSent.load(ordering: .relaxed))
        json.add("heartbeat_acks", counters.heartbeatAcks.load(ordering: .relaxed))
        json.add("dropped_during_hold", dropped)
        json.add("fd_limit", fdLimit)
        return json
    }
}
