import AsyncToolkit
import Foundation
import IMClient
import IMGateway
import IMWire
import Testing
import IMTestSupport

/// The broker killed and restarted under chat from two gateways: every device is back at
/// once, and no chat reaches a device twice unless marked RESEND.
@Suite("Broker restart under load from two gateways", .stopsWhatItStarts, .timeLimit(.minutes(3)))
struct BrokerRestartTests {
    static let users = (0..<6).map { "user\($0)" }
    static let devices = ["phone", "laptop"]

    @Test("kill -9 of the broker, restarted on its port: every device of 6 users (each with a device on each of two gateways) logs in again within 5 s; a chat sent once (no device resends here) never reaches a device twice without RESEND")
    func brokerRestartedUnderLoad() async throws {
        var broker = try await TestBroker.start()
        let port = broker.port
        let gateways = [
            try await IMGWProcess.start(broker: broker, archive: .none),
            try await IMGWProcess.start(broker: broker, archive: .none),
        ]
        let minter = TokenMinter(secret: IMGWProcess.secret)
        var devices: [RestartingDevice] = []
        for (index, user) in Self.users.enumerated() {
            for (side, device) in Self.devices.enumerated() {
                devices.append(RestartingDevice(
                    user: user, device: device, peer: Self.users[(index + 1) % Self.users.count], port: gateways[side].port,
                    token: try await minter.mint(user: user)))
            }
        }
        let runs = devices.map { device in Task { await device.run() } }
        defer { for run in runs { run.cancel() } }

        // Under load: every device logged in and chatting, messages flowing both ways.
        for device in devices { try await device.waitUntil("logged in and delivered to", within: 30) { $0.logins >= 1 && $0.delivered >= 50 } }

        await broker.kill9()
        // Every device sees its connection end (the gateways lose their MQTT sessions).
        for device in devices { try await device.waitUntil("dropped after the broker's death", within: 15) { $0.drops >= 1 } }
        // A login can succeed once the broker listens, a moment before it says it is running.
        let starting = ContinuousClock.now
        broker = try await TestBroker.start(port: port)
        let restarted = ContinuousClock.now

        var late: [String] = []
        for device in devices {
            try await device.waitUntil("logged in again after the restart", within: 30) { $0.lastLogin.map { $0 > starting } == true }
            let back = await device.lastLogin! - restarted
            if back > .seconds(5) { late.append("\(device.name) after \(back)") }
        }
        #expect(late.isEmpty, "back more than 5 s after the broker restarted: \(late)")
        // Chat goes on after the restart: each device gets more.
        let before = await devices.asyncMap { await $0.delivered }
        for (device, count) in zip(devices, before) {
            try await device.waitUntil("delivered to after the restart", within: 30) { $0.delivered >= count + 50 }
        }
        for device in devices { await device.stop() }
        for run in runs { await run.value }

        var repeats: [String] = []
        var deliveries = 0
        for device in devices {
            let report = await device.report
            deliveries += report.deliveries
            repeats += report.repeatsWithoutResend.map { "\(device.name): \($0)" }
        }
        #expect(deliveries > 0)
        #expect(repeats.isEmpty, "delivered again without RESEND, though sent once: \(repeats.prefix(20))")
        for gateway in gateways { await gateway.stop() }
        await broker.stop()
    }
}

extension BrokerRestartTests {
    @Test("the broker down for 6 s: IMClient devices with the default backoff are back within 2 s of its restart, since their logins wait at the gateway for it instead of failing and backing off")
    func loginsWaitForTheBroker() async throws {
        var broker = try await TestBroker.start()
        let port = broker.port
        let gateway = try await IMGWProcess.start(broker: broker)
        let minter = TokenMinter(secret: IMGWProcess.secret)
        var clients: [IMClient] = []
        var events: [Collector<IMClient.Event>] = []
        for index in 0..<8 {
            let client = try await tracked(IMClient.connect(IMClient.Configuration(
                port: gateway.port, token: try await minter.mint(user: "waiter\(index)"), deviceID: "phone")))
            clients.append(client)
            events.append(Collector(client.events))
        }
        await broker.kill9()
        for collector in events {
            while true {
                if case .reconnecting = try await collector.next(within: 15, "the drop") { break }
            }
        }
        // The outage: long enough for a client refused at each try to reach its (2-4] s level.
        try await Task.sleep(for: .seconds(6))
        broker = try await TestBroker.start(port: port)
        let restarted = ContinuousClock.now
        var late: [String] = []
        for (index, collector) in events.enumerated() {
            while true {
                if case .reconnected = try await collector.next(within: 30, "back after the restart") { break }
            }
            let back = ContinuousClock.now - restarted
            if back > .seconds(2) { late.append("waiter\(index) after \(back)") }
        }
        #expect(late.isEmpty, "back more than 2 s after the broker restarted: \(late); imgw: \(gateway.output.text.withLock { $0 }.suffix(4000))")
        for client in clients { await client.close() }
        await gateway.stop()
        await broker.stop()
    }
}

extension Array {
    func asyncMap<T>(_ transform: (Element) async -> T) async -> [T] {
        var results: [T] = []
        for element in self { results.append(await transform(element)) }
        return results
    }
}

/// A raw TLV device that logs in again whenever its connection ends, sends a chat to `peer`
/// every 10 ms without ever resending one, and records each DELIVERY (and ACKs it).
actor RestartingDevice {
    struct Progress: Sendable {
        var logins = 0
        var drops = 0
        var delivered = 0
        var lastLogin: ContinuousClock.Instant?
    }

    struct Report: Sendable {
        var deliveries: Int
        /// FROM/MESSAGE_ID delivered more than once, a later copy without RESEND.
        var repeatsWithoutResend: [String]
    }

    nonisolated let name: String
    let user: String
    let device: String
    let peer: String
    let port: Int
    let token: String
    private let progress = AsyncCondition(Progress())
    /// Copies of each FROM/MESSAGE_ID, and whether each later one said RESEND.
    private var seen: [String: Int] = [:]
    private var repeats: [String] = []
    private var total = 0

    init(user: String, device: String, peer: String, port: Int, token: String) {
        self.name = "\(user)/\(device)"
        self.user = user
        self.device = device
        self.peer = peer
        self.port = port
        self.token = token
    }

    var delivered: Int { progress.read(\.delivered) }
    var lastLogin: ContinuousClock.Instant? { progress.read(\.lastLogin) }
    var report: Report { Report(deliveries: total, repeatsWithoutResend: repeats) }

    private var stopped = false

    /// Ends ``run()`` after what it is doing.
    func stop() { stopped = true }

    /// Logs in, chats and takes deliveries until ``stop()``.
    func run() async {
        var sent = 0
        while !stopped, !Task.isCancelled {
            guard let connection = try? await TestDevice.connect(port: port) else {
                try? await Task.sleep(for: .milliseconds(50))  // the gateway is there; a refused connect is retried
                continue
            }
            do {
                try await connection.login(token: token, device: device)
            } catch {
                await connection.drop()
                try? await Task.sleep(for: .milliseconds(100))  // a login refused while the broker is away is tried again
                continue
            }
            update { $0.logins += 1; $0.lastLogin = .now }
            var nextSend = ContinuousClock.now
            while !stopped, !Task.isCancelled, connection.isActive {
                if ContinuousClock.now >= nextSend {
                    sent += 1
                    _ = try? await connection.send(.chat(ChatSend(to: peer, messageID: "\(device)-\(sent)", content: .text("m"))))
                    nextSend = .now + .milliseconds(10)
                }
                guard let (frame, message) = try? await connection.next(within: 0.01, "a frame") else { continue }
                switch message {
                case .delivery(let delivery):
                    record(delivery)
                    try? await connection.ack(frame)
                case .error, .kick:
                    await connection.drop()
                default:
                    continue
                }
            }
            await connection.drop()
            update { $0.drops += 1 }
        }
    }

    private func record(_ delivery: ChatDelivery) {
        let key = "\(delivery.from)/\(delivery.messageID)"
        let copies = seen[key, default: 0] + 1
        seen[key] = copies
        total += 1
        if copies > 1 && !delivery.resend { repeats.append("\(key) (copy \(copies))") }
        if copies == 1 { update { $0.delivered += 1 } }
    }

    private func update(_ change: (inout Progress) -> Void) {
        progress.withLock(change)
    }

    /// Returns once `check` holds; throws after `seconds`.
    func waitUntil(_ what: String, within seconds: Double, _ check: @escaping @Sendable (Progress) -> Bool) async throws {
        guard await progress.wait(timeout: .seconds(seconds), until: check) else {
            throw TestError("\(name) not \(what) within \(seconds) s: \(progress.read { $0 })")
        }
    }
}
