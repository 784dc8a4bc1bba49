import IMGateway
import NIOCore

/// The gateway path: N sender devices chat to N receiver devices through imgw, over TLV,
/// all on one NIO event loop of this process (so a pair's receiver can hand window slots
/// back to its sender directly, see ``PairLink``).
enum GatewayChatRun {
    /// Logs in the receivers, then the senders, runs the workload, closes the devices.
    /// - Parameters:
    ///   - runID: Makes the device names unique (one per round: a round must not see
    ///     another's messages).
    ///   - title: The phase in log lines (default "gateway"), e.g. "gateway round 2/4".
    static func run(
        _ settings: ChatSettings, environment: BenchEnvironment, loop: any EventLoop, runID: String,
        title: String = "gateway"
    ) async throws -> ChatPhaseResult {
        let ledger = ChatLedger(pairs: settings.pairs)
        let receiverNames = (0..<settings.pairs).map { "bench-\(runID)-r\($0)" }
        let senderNames = (0..<settings.pairs).map { "bench-\(runID)-s\($0)" }
        Log.info("\(title): logging in \(settings.pairs) receiver(s), then \(settings.pairs) sender(s)")
        let links = try await loop.submit {
            (0..<settings.pairs).map { _ in NIOLoopBound(PairLink(), eventLoop: loop) }
        }.get()
        // Receivers first: their sessions (and inbox subscriptions) exist before anything is sent.
        let receivers = try await connectAll(receiverNames, environment: environment, loop: loop) { pair in
            { ChatReceiver(pair: pair, ledger: ledger, link: links[pair].value) }
        }
        let senders: [BenchDevice]
        do {
            senders = try await connectAll(senderNames, environment: environment, loop: loop) { pair in
                {
                    ChatSender(
                        pair: pair, recipient: receiverNames[pair], ledger: ledger, settings: settings, link: links[pair].value)
                }
            }
        } catch {
            for device in receivers { await device.close() }
            throw error
        }

        var watch: [ChatPhase.Watched] = [ChatPhase.Watched(label: "bench", pid: ProcessSample.ownPID())]
        if let pid = environment.gatewayPID { watch.append(ChatPhase.Watched(label: "gateway", pid: pid, threads: true)) }
        if let pid = environment.brokerPID { watch.append(ChatPhase.Watched(label: "broker", pid: pid)) }
        let result: ChatPhaseResult
        do {
            result = try await ChatPhase.measure(
                "gateway", title: title, settings: settings, ledger: ledger, watch: watch,
                start: { for sender in senders { sender.send(.start) } },
                stop: { for sender in senders { sender.send(.stop) } })
        } catch {
            for device in senders + receivers { await device.close() }
            throw error
        }
        for device in senders + receivers { await device.close() }
        return result
    }

    /// Connects and logs in one device per name, concurrently; fails with the first refusal.
    static func connectAll(
        _ names: [String], environment: BenchEnvironment, loop: any EventLoop,
        behaviour: @escaping @Sendable (Int) -> @Sendable () -> any DeviceBehaviour
    ) async throws -> [BenchDevice] {
        let minter = TokenMinter(secret: environment.secret)
        var tokens: [String] = []
        for name in names { tokens.append(try await minter.mint(user: name, device: "bench", validFor: 3600)) }
        let frozen = tokens
        return try await withThrowingTaskGroup(of: (Int, BenchDevice).self) { group in
            for (index, name) in names.enumerated() {
                group.addTask {
                    do {
                        let device = try await BenchDevice.connect(
                            to: environment.gateway, on: loop, token: frozen[index], deviceID: "bench",
                            behaviour: behaviour(index))
                        return (index, device)
                    } catch {
                        throw BenchError.loginRefused(user: name, "\(error)")
                    }
                }
            }
            var devices = [BenchDevice?](repeating: nil, count: names.count)
            do {
                for try await (index, device) in group { devices[index] = device }
            } catch {
                for case let device? in devices { await device.close() }
                throw error
            }
            return devices.map { $0! }
        }
    }
}
